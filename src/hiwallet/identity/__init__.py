"""The identity service: an OpenID provider that stands in for Keycloak, realm by realm.

It speaks Keycloak's paths and shapes so that the same clients work against a real Keycloak in
production, where only the base URL in configuration changes (docs/identity.md).
"""

# Nothing here: a deployable. Only the composition roots (cli, up) import its modules.
__all__: list[str] = []
