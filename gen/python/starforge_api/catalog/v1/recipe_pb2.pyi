from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ParameterType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PARAMETER_TYPE_UNSPECIFIED: _ClassVar[ParameterType]
    PARAMETER_TYPE_INT: _ClassVar[ParameterType]
    PARAMETER_TYPE_FLOAT: _ClassVar[ParameterType]
    PARAMETER_TYPE_STRING: _ClassVar[ParameterType]
    PARAMETER_TYPE_BOOL: _ClassVar[ParameterType]
    PARAMETER_TYPE_STRING_LIST: _ClassVar[ParameterType]
PARAMETER_TYPE_UNSPECIFIED: ParameterType
PARAMETER_TYPE_INT: ParameterType
PARAMETER_TYPE_FLOAT: ParameterType
PARAMETER_TYPE_STRING: ParameterType
PARAMETER_TYPE_BOOL: ParameterType
PARAMETER_TYPE_STRING_LIST: ParameterType

class Parameter(_message.Message):
    __slots__ = ("key", "type", "default_json", "min", "max", "choices", "doc", "required")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_JSON_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    DOC_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    key: str
    type: ParameterType
    default_json: str
    min: float
    max: float
    choices: _containers.RepeatedScalarFieldContainer[str]
    doc: str
    required: bool
    def __init__(self, key: _Optional[str] = ..., type: _Optional[_Union[ParameterType, str]] = ..., default_json: _Optional[str] = ..., min: _Optional[float] = ..., max: _Optional[float] = ..., choices: _Optional[_Iterable[str]] = ..., doc: _Optional[str] = ..., required: _Optional[bool] = ...) -> None: ...

class Runtime(_message.Message):
    __slots__ = ("framework_version", "runtime_id", "image", "python", "capabilities", "default")
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    framework_version: str
    runtime_id: str
    image: str
    python: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    default: bool
    def __init__(self, framework_version: _Optional[str] = ..., runtime_id: _Optional[str] = ..., image: _Optional[str] = ..., python: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ..., default: _Optional[bool] = ...) -> None: ...

class Recipe(_message.Message):
    __slots__ = ("name", "framework", "version", "digest", "description", "adapter", "entrypoint", "parameters", "metrics", "artifacts", "runtimes", "requires_model", "requires_train_data", "multi_pool", "pool_names", "default_profile", "stages", "default_observability")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_TRAIN_DATA_FIELD_NUMBER: _ClassVar[int]
    MULTI_POOL_FIELD_NUMBER: _ClassVar[int]
    POOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PROFILE_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_OBSERVABILITY_FIELD_NUMBER: _ClassVar[int]
    name: str
    framework: str
    version: str
    digest: str
    description: str
    adapter: str
    entrypoint: str
    parameters: _containers.RepeatedCompositeFieldContainer[Parameter]
    metrics: _containers.RepeatedScalarFieldContainer[str]
    artifacts: _containers.RepeatedScalarFieldContainer[str]
    runtimes: _containers.RepeatedCompositeFieldContainer[Runtime]
    requires_model: bool
    requires_train_data: bool
    multi_pool: bool
    pool_names: _containers.RepeatedScalarFieldContainer[str]
    default_profile: str
    stages: _containers.RepeatedScalarFieldContainer[str]
    default_observability: str
    def __init__(self, name: _Optional[str] = ..., framework: _Optional[str] = ..., version: _Optional[str] = ..., digest: _Optional[str] = ..., description: _Optional[str] = ..., adapter: _Optional[str] = ..., entrypoint: _Optional[str] = ..., parameters: _Optional[_Iterable[_Union[Parameter, _Mapping]]] = ..., metrics: _Optional[_Iterable[str]] = ..., artifacts: _Optional[_Iterable[str]] = ..., runtimes: _Optional[_Iterable[_Union[Runtime, _Mapping]]] = ..., requires_model: _Optional[bool] = ..., requires_train_data: _Optional[bool] = ..., multi_pool: _Optional[bool] = ..., pool_names: _Optional[_Iterable[str]] = ..., default_profile: _Optional[str] = ..., stages: _Optional[_Iterable[str]] = ..., default_observability: _Optional[str] = ...) -> None: ...

class RecipeSummary(_message.Message):
    __slots__ = ("name", "version", "digest", "summary")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    digest: str
    summary: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., digest: _Optional[str] = ..., summary: _Optional[str] = ...) -> None: ...
