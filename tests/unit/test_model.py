from __future__ import annotations

import pytest
import torch

from chesslm.model import gpt, presets
from chesslm.train import optim


def test_baseline_has_exactly_the_gpt2_small_parameter_count() -> None:
    with torch.device("meta"):  # no memory, no init cost
        net = gpt.GPT(presets.PRESETS["baseline"])
    assert net.num_parameters() == presets.BASELINE_PARAMETERS == 85_940_736
    assert net.lm_head.weight is net.transformer.wte.weight


def test_tiny_forward_is_causal_and_fp32() -> None:
    torch.manual_seed(0)
    net = gpt.build("tiny")
    assert all(p.dtype == torch.float32 for p in net.parameters())
    x = torch.tensor([[69, 12, 28, 64, 6, 21, 64]])
    full = net(x)
    assert full.shape == (1, 7, 128)
    # changing a later token must not change earlier logits
    y = x.clone()
    y[0, 5] = 30
    torch.testing.assert_close(net(y)[:, :5], full[:, :5], rtol=0, atol=0)


def test_right_padding_does_not_change_valid_logits() -> None:
    torch.manual_seed(0)
    net = gpt.build("tiny")
    x = torch.tensor([[69, 12, 28, 64]])
    padded = torch.tensor([[69, 12, 28, 64, 71, 71]])
    torch.testing.assert_close(net(padded)[:, :4], net(x), rtol=1e-6, atol=1e-6)


def test_weight_decay_only_on_matrices() -> None:
    net = gpt.build("tiny")
    decay, no_decay = net.param_groups(0.1)
    assert all(p.dim() >= 2 for p in decay["params"]) and decay["weight_decay"] == 0.1
    assert all(p.dim() < 2 for p in no_decay["params"]) and no_decay["weight_decay"] == 0.0
    opt = optim.optimizer(net, 3e-4, device=torch.device("cpu"))
    assert opt.defaults["betas"] == (0.9, 0.95)


def test_schedule_horizon_defaults_and_refuses_long_warmup() -> None:
    assert optim.horizon(epochs=2, steps_per_epoch=50, schedule_steps=None, warmup_steps=None) == (
        100,
        10,
    )
    import pytest

    with pytest.raises(ValueError, match="warmup_steps"):
        optim.horizon(epochs=1, steps_per_epoch=5, schedule_steps=None, warmup_steps=5)


def test_another_presets_weights_name_the_first_tensor_and_both_shapes(tmp_path) -> None:
    """A checkpoint (or an export) that holds the weights of another preset than it names: one
    line naming the first tensor that differs and both its shapes, not torch's key list."""
    from chesslm import files, seal
    from chesslm.export import folder, load
    from chesslm.model import checkpoint, weights
    from tests.helpers import model_checkpoint

    path = model_checkpoint(tmp_path / "best.pt", preset="small")
    payload = checkpoint.load(path)
    payload["identity"]["model"]["preset"] = "tiny"  # a small run's weights, labelled tiny
    checkpoint.save(path, payload)
    with pytest.raises(checkpoint.CheckpointError) as caught:
        weights.load_model(path, "cpu")
    line = str(caught.value)
    assert line.startswith(f"{path}: weights unfit for preset 'tiny': first transformer.wte")
    assert "transformer.wte.weight: [128, 128] in the file, [128, 64] in the model (" in line
    assert "\n" not in line

    records = {}
    for name in ("results", "manifest", "receipt"):
        records[name] = tmp_path / f"{name}.json"
        files.write_json_atomic(records[name], {})
    for preset in ("tiny", "small"):
        ckpt = model_checkpoint(tmp_path / f"{preset}.pt", preset=preset)
        folder.export(folder.Sources(run=preset, checkpoint=ckpt, **records), tmp_path / preset)
    small_weights = (tmp_path / "small" / folder.FILES["weights"]).read_bytes()
    (tmp_path / "tiny" / folder.FILES["weights"]).write_bytes(small_weights)
    # summed again, as a publisher who put the wrong weights in would: its sums hold
    seal.write_sums(tmp_path / "tiny", list(seal.read_sums(tmp_path / "tiny", "-")))
    with pytest.raises(checkpoint.CheckpointError) as caught:
        load.load_export(tmp_path / "tiny", "cpu")
    line = str(caught.value)
    assert "transformer.wte.weight: [128, 128] in the file, [128, 64] in the model (" in line
    assert "\n" not in line
