"""The unary calls of `sf submit` outside ControlService, for `cli.fastclient.ReadClient`.

A module of their own so that `sf job ls` and `sf job status`, which make only ControlService
reads, do not load these services' generated messages.
"""

from __future__ import annotations

from starforge_api.catalog.v1 import catalog_service_pb2 as catalog_pb
from starforge_api.control.v1 import account_service_pb2 as account_pb
from starforge_api.control.v1 import fleet_service_pb2 as fleet_pb

from cli.fastclient import Method


class Catalog:
    """The CatalogService reads of `sf submit` (its validation, --upgrade-recipe)."""

    GetRecipe = Method(
        "catalog", "GetRecipe", "/starforge.catalog.v1.CatalogService/GetRecipe", catalog_pb.GetRecipeResponse
    )
    ResolveLock = Method(
        "catalog", "ResolveLock", "/starforge.catalog.v1.CatalogService/ResolveLock", catalog_pb.ResolveLockResponse
    )


class Fleets:
    """The FleetService read of `sf submit`'s validation."""

    ListProfiles = Method(
        "fleets", "ListProfiles", "/starforge.control.v1.FleetService/ListProfiles", fleet_pb.ListProfilesResponse
    )


class Accounts:
    """The AccountService read of `sf submit` (a lab without a project)."""

    WhoAmI = Method("accounts", "WhoAmI", "/starforge.control.v1.AccountService/WhoAmI", account_pb.WhoAmIResponse)


CATALOG = Catalog()
FLEETS = Fleets()
ACCOUNTS = Accounts()
