"""Local validation before anything is uploaded: overrides and profiles checked against what the
console publishes (its recipe for the method, its hardware registry), with the very code the
server runs at admission (recipes.params, common.profiles) — so a typo costs no upload, and the
message is the one the server would give.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starforge_api.catalog.v1 import catalog_service_pb2
from starforge_api.control.v1 import fleet_service_pb2
from starforge_api.job.v1 import job_spec_pb2

from cli.errors import usage
from common import errors, profiles
from recipes import params
from recipes.proto import decl_from_proto

if TYPE_CHECKING:
    from cli.client import Client
    from cli.fastclient import ReadClient


def check_against_console(
    client: Client | ReadClient,
    method: str,
    config: dict[str, Any],
    pools: Sequence[job_spec_pb2.PoolRequest],
    overrides: Sequence[job_spec_pb2.Override],
    framework_version: str = "",
    *,
    asked_version: str = "",
) -> None:
    """Raise a usage error (exit 2) for an override or profile the console would refuse; framework
    keys are those of `framework_version` (empty: the recipe's default runtime). `asked_version`
    (--framework-version) must be one the recipe publishes."""
    recipe = client.call(client.catalog.GetRecipe, catalog_service_pb2.GetRecipeRequest(name=method)).recipe
    registry = client.call(client.fleets.ListProfiles, fleet_service_pb2.ListProfilesRequest()).profiles
    decl = decl_from_proto(recipe)
    if asked_version and decl.runtime(asked_version) is None:
        known = ", ".join(r.framework_version for r in decl.runtimes)
        raise usage(
            f"--framework-version {asked_version}: {method} has no framework version {asked_version!r}; "
            f"known versions: {known}"
        )
    try:
        params.resolve_config(decl, config, overrides, framework_version)
        profiles.resolve(pools, list(registry), decl.default_profile)
    except errors.InvalidArgument as e:
        details = [v.description for v in e.field_violations if v.description != e.message]
        raise usage(e.message, details=details or None) from None
