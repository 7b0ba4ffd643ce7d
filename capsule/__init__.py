"""The Job Capsule: what runs inside the training container.

``bootstrap.sh`` verifies the capsule and the workspace against ``capsule.json`` and starts the
runner (``capsule/runner``, packaged as the top-level package ``sfrunner`` inside a reproducible,
content-addressed ``runner-<sha16>.pex``). The runner starts the training command, journals and
streams lifecycle, logs, metrics and samples to the control plane's IngestService. Training code
imports the stdlib-only SDK from ``capsule/sdk/starforge``. ``capsule.layout`` produces
``capsule.json`` for the control plane; ``capsule.build`` builds the pex.
"""
