# Sourced by the benchmarks/gpu_*.sh scripts on a lent GPU machine: its image has torch but not
# snakemake or python-chess, so the wheels carried in .whl/ go to /tmp/site; NVLink multicast
# stays off (the workplace's rule for shared hosts); $OUT (set by the device tool) gets copies.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-results/device-out}
mkdir -p "$OUT"
