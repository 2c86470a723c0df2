"""The lab's models in other tools: ``tlens`` exports a model to TransformerLens (the
``interop`` extra: ``pip install 'attnlab[interop]'``). The heavy libraries are imported inside
the functions that need them, so nothing here costs an import until it is used."""
