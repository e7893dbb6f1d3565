"""The inputs: the engine's page pool and tables, ``Inputs``, the KV cache and the transfer."""
