"""The platform's typed configuration: the sections of a composed Hydra mapping as validated
dataclasses (``sections``) and the whole, resolved once into the run it describes
(``platform``: ``PlatformConfig``).
"""
