"""The export of a run's model for use without this package: the Hugging Face GPT-2 layout
(``gpt2``: config and safetensors weights), the tokenizer's mapping (``vocabulary``) and a
model card (``card``), written together by ``folder`` (rule export); ``load`` reads a folder
back as the model (``chesslm-uci`` and ``chesslm-analyse`` play or score from one)."""
