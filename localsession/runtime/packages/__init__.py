"""Model packages and their artifacts: the versioned registry on disk (``registry``), the
List/Describe/Delete ModelPackage operations (``listing``), the registry's files as S3
objects (``artifacts``) and the prune policy of ``localsession packages prune``."""
