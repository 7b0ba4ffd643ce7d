from starforge_api.catalog.v1 import recipe_pb2 as _recipe_pb2
from starforge_api.job.v1 import job_spec_pb2 as _job_spec_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListRecipesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRecipesResponse(_message.Message):
    __slots__ = ("catalog_version", "catalog_digest", "recipes")
    CATALOG_VERSION_FIELD_NUMBER: _ClassVar[int]
    CATALOG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RECIPES_FIELD_NUMBER: _ClassVar[int]
    catalog_version: str
    catalog_digest: str
    recipes: _containers.RepeatedCompositeFieldContainer[_recipe_pb2.RecipeSummary]
    def __init__(self, catalog_version: _Optional[str] = ..., catalog_digest: _Optional[str] = ..., recipes: _Optional[_Iterable[_Union[_recipe_pb2.RecipeSummary, _Mapping]]] = ...) -> None: ...

class GetRecipeRequest(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class GetRecipeResponse(_message.Message):
    __slots__ = ("recipe",)
    RECIPE_FIELD_NUMBER: _ClassVar[int]
    recipe: _recipe_pb2.Recipe
    def __init__(self, recipe: _Optional[_Union[_recipe_pb2.Recipe, _Mapping]] = ...) -> None: ...

class ResolveLockRequest(_message.Message):
    __slots__ = ("method", "framework_version")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    method: str
    framework_version: str
    def __init__(self, method: _Optional[str] = ..., framework_version: _Optional[str] = ...) -> None: ...

class ResolveLockResponse(_message.Message):
    __slots__ = ("lock",)
    LOCK_FIELD_NUMBER: _ClassVar[int]
    lock: _job_spec_pb2.RecipeLock
    def __init__(self, lock: _Optional[_Union[_job_spec_pb2.RecipeLock, _Mapping]] = ...) -> None: ...
