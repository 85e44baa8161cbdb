"""The model floor: what training, play, export and compare all read.

``presets`` the model sizes and contexts (torch-free, so the workflow checks a config against
them at parse time).
"""
