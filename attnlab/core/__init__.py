"""Layer 0, the foundation: file paths and atomic writes, numeric bounds, devices, CPU process
settings, the shipped data files, several-GPU helpers. Imports nothing else of attnlab."""
