"""CEL device selectors as kube-scheduler's DRA evaluates them.

The API lives in two modules (nothing is re-exported here):
- `policies.dra.cel.env`: `DeviceEnv`, `AttributeValue`, `Semver`, `parse_semver`;
- `policies.dra.cel.selector`: `compile_selector`, `CompiledSelector` and the errors.

Inside: lexer -> parser (AST) -> checker (static types) -> program (closures that
evaluate with a cost meter), with the functions of the libraries Kubernetes enables
in `library_*` modules. docs/dra.md ("CEL selectors") lists what is supported.
"""
