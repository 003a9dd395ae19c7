"""Base models: the catalog that resolves a name (``catalog``), where models come from
without torch (``sources``: the state directory, the model map, the Hugging Face cache) and
the local SageMaker Public Hub (``hub``)."""
