# chesslm: Lichess PGN -> verified dataset -> token cache -> probe -> bounded DDP segments
# -> results and reports. README.md gives the commands; config/README.md the settings.
from snakemake.utils import min_version

min_version("9.20")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/ladder.smk"
include: "workflow/rules/play.smk"
include: "workflow/rules/analyse.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/export.smk"


rule all:
    default_target: True
    input:
        get_final_outputs,
