"""The PyTorch backend (``backend.PyTorchBackend``): TorchScript, the Python runtime (``model.py``
+ ``torch.compile``) and ``.pt2`` programs."""
