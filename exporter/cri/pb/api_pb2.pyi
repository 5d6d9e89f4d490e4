from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NamespaceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    POD: _ClassVar[NamespaceMode]
    CONTAINER: _ClassVar[NamespaceMode]
    NODE: _ClassVar[NamespaceMode]
    TARGET: _ClassVar[NamespaceMode]

class PodSandboxState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_READY: _ClassVar[PodSandboxState]
    SANDBOX_NOTREADY: _ClassVar[PodSandboxState]

class ContainerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTAINER_CREATED: _ClassVar[ContainerState]
    CONTAINER_RUNNING: _ClassVar[ContainerState]
    CONTAINER_EXITED: _ClassVar[ContainerState]
    CONTAINER_UNKNOWN: _ClassVar[ContainerState]
POD: NamespaceMode
CONTAINER: NamespaceMode
NODE: NamespaceMode
TARGET: NamespaceMode
SANDBOX_READY: PodSandboxState
SANDBOX_NOTREADY: PodSandboxState
CONTAINER_CREATED: ContainerState
CONTAINER_RUNNING: ContainerState
CONTAINER_EXITED: ContainerState
CONTAINER_UNKNOWN: ContainerState

class VersionRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class VersionResponse(_message.Message):
    __slots__ = ("version", "runtime_name", "runtime_version", "runtime_api_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_API_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    runtime_name: str
    runtime_version: str
    runtime_api_version: str
    def __init__(self, version: _Optional[str] = ..., runtime_name: _Optional[str] = ..., runtime_version: _Optional[str] = ..., runtime_api_version: _Optional[str] = ...) -> None: ...

class RuntimeCondition(_message.Message):
    __slots__ = ("type", "status", "reason", "message")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    type: str
    status: bool
    reason: str
    message: str
    def __init__(self, type: _Optional[str] = ..., status: _Optional[bool] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RuntimeStatus(_message.Message):
    __slots__ = ("conditions",)
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    conditions: _containers.RepeatedCompositeFieldContainer[RuntimeCondition]
    def __init__(self, conditions: _Optional[_Iterable[_Union[RuntimeCondition, _Mapping]]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("verbose",)
    VERBOSE_FIELD_NUMBER: _ClassVar[int]
    verbose: bool
    def __init__(self, verbose: _Optional[bool] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("status", "info")
    class InfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    status: RuntimeStatus
    info: _containers.ScalarMap[str, str]
    def __init__(self, status: _Optional[_Union[RuntimeStatus, _Mapping]] = ..., info: _Optional[_Mapping[str, str]] = ...) -> None: ...

class NamespaceOption(_message.Message):
    __slots__ = ("network", "pid", "ipc", "target_id")
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    IPC_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    network: NamespaceMode
    pid: NamespaceMode
    ipc: NamespaceMode
    target_id: str
    def __init__(self, network: _Optional[_Union[NamespaceMode, str]] = ..., pid: _Optional[_Union[NamespaceMode, str]] = ..., ipc: _Optional[_Union[NamespaceMode, str]] = ..., target_id: _Optional[str] = ...) -> None: ...

class Int64Value(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: int
    def __init__(self, value: _Optional[int] = ...) -> None: ...

class UInt64Value(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: int
    def __init__(self, value: _Optional[int] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ImageSpec(_message.Message):
    __slots__ = ("image", "annotations")
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    image: str
    annotations: _containers.ScalarMap[str, str]
    def __init__(self, image: _Optional[str] = ..., annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class LinuxContainerResources(_message.Message):
    __slots__ = ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit_in_bytes", "oom_score_adj", "cpuset_cpus", "cpuset_mems", "memory_swap_limit_in_bytes")
    CPU_PERIOD_FIELD_NUMBER: _ClassVar[int]
    CPU_QUOTA_FIELD_NUMBER: _ClassVar[int]
    CPU_SHARES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    OOM_SCORE_ADJ_FIELD_NUMBER: _ClassVar[int]
    CPUSET_CPUS_FIELD_NUMBER: _ClassVar[int]
    CPUSET_MEMS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SWAP_LIMIT_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_period: int
    cpu_quota: int
    cpu_shares: int
    memory_limit_in_bytes: int
    oom_score_adj: int
    cpuset_cpus: str
    cpuset_mems: str
    memory_swap_limit_in_bytes: int
    def __init__(self, cpu_period: _Optional[int] = ..., cpu_quota: _Optional[int] = ..., cpu_shares: _Optional[int] = ..., memory_limit_in_bytes: _Optional[int] = ..., oom_score_adj: _Optional[int] = ..., cpuset_cpus: _Optional[str] = ..., cpuset_mems: _Optional[str] = ..., memory_swap_limit_in_bytes: _Optional[int] = ...) -> None: ...

class LinuxSandboxSecurityContext(_message.Message):
    __slots__ = ("namespace_options", "readonly_rootfs", "privileged")
    NAMESPACE_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    READONLY_ROOTFS_FIELD_NUMBER: _ClassVar[int]
    PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    namespace_options: NamespaceOption
    readonly_rootfs: bool
    privileged: bool
    def __init__(self, namespace_options: _Optional[_Union[NamespaceOption, _Mapping]] = ..., readonly_rootfs: _Optional[bool] = ..., privileged: _Optional[bool] = ...) -> None: ...

class LinuxPodSandboxConfig(_message.Message):
    __slots__ = ("cgroup_parent", "security_context")
    CGROUP_PARENT_FIELD_NUMBER: _ClassVar[int]
    SECURITY_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    cgroup_parent: str
    security_context: LinuxSandboxSecurityContext
    def __init__(self, cgroup_parent: _Optional[str] = ..., security_context: _Optional[_Union[LinuxSandboxSecurityContext, _Mapping]] = ...) -> None: ...

class PodSandboxMetadata(_message.Message):
    __slots__ = ("name", "uid", "namespace", "attempt")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    name: str
    uid: str
    namespace: str
    attempt: int
    def __init__(self, name: _Optional[str] = ..., uid: _Optional[str] = ..., namespace: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class PodSandboxConfig(_message.Message):
    __slots__ = ("metadata", "hostname", "log_directory", "labels", "annotations", "linux")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    LOG_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    LINUX_FIELD_NUMBER: _ClassVar[int]
    metadata: PodSandboxMetadata
    hostname: str
    log_directory: str
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    linux: LinuxPodSandboxConfig
    def __init__(self, metadata: _Optional[_Union[PodSandboxMetadata, _Mapping]] = ..., hostname: _Optional[str] = ..., log_directory: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., linux: _Optional[_Union[LinuxPodSandboxConfig, _Mapping]] = ...) -> None: ...

class RunPodSandboxRequest(_message.Message):
    __slots__ = ("config", "runtime_handler")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_HANDLER_FIELD_NUMBER: _ClassVar[int]
    config: PodSandboxConfig
    runtime_handler: str
    def __init__(self, config: _Optional[_Union[PodSandboxConfig, _Mapping]] = ..., runtime_handler: _Optional[str] = ...) -> None: ...

class RunPodSandboxResponse(_message.Message):
    __slots__ = ("pod_sandbox_id",)
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    pod_sandbox_id: str
    def __init__(self, pod_sandbox_id: _Optional[str] = ...) -> None: ...

class StopPodSandboxRequest(_message.Message):
    __slots__ = ("pod_sandbox_id",)
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    pod_sandbox_id: str
    def __init__(self, pod_sandbox_id: _Optional[str] = ...) -> None: ...

class StopPodSandboxResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RemovePodSandboxRequest(_message.Message):
    __slots__ = ("pod_sandbox_id",)
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    pod_sandbox_id: str
    def __init__(self, pod_sandbox_id: _Optional[str] = ...) -> None: ...

class RemovePodSandboxResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PodSandboxStatusRequest(_message.Message):
    __slots__ = ("pod_sandbox_id", "verbose")
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    VERBOSE_FIELD_NUMBER: _ClassVar[int]
    pod_sandbox_id: str
    verbose: bool
    def __init__(self, pod_sandbox_id: _Optional[str] = ..., verbose: _Optional[bool] = ...) -> None: ...

class PodSandboxNetworkStatus(_message.Message):
    __slots__ = ("ip",)
    IP_FIELD_NUMBER: _ClassVar[int]
    ip: str
    def __init__(self, ip: _Optional[str] = ...) -> None: ...

class PodSandboxStatus(_message.Message):
    __slots__ = ("id", "metadata", "state", "created_at", "network", "labels", "annotations", "runtime_handler")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_HANDLER_FIELD_NUMBER: _ClassVar[int]
    id: str
    metadata: PodSandboxMetadata
    state: PodSandboxState
    created_at: int
    network: PodSandboxNetworkStatus
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    runtime_handler: str
    def __init__(self, id: _Optional[str] = ..., metadata: _Optional[_Union[PodSandboxMetadata, _Mapping]] = ..., state: _Optional[_Union[PodSandboxState, str]] = ..., created_at: _Optional[int] = ..., network: _Optional[_Union[PodSandboxNetworkStatus, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., runtime_handler: _Optional[str] = ...) -> None: ...

class PodSandboxStatusResponse(_message.Message):
    __slots__ = ("status", "info")
    class InfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    status: PodSandboxStatus
    info: _containers.ScalarMap[str, str]
    def __init__(self, status: _Optional[_Union[PodSandboxStatus, _Mapping]] = ..., info: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PodSandboxStateValue(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: PodSandboxState
    def __init__(self, state: _Optional[_Union[PodSandboxState, str]] = ...) -> None: ...

class PodSandboxFilter(_message.Message):
    __slots__ = ("id", "state", "label_selector")
    class LabelSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: PodSandboxStateValue
    label_selector: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[PodSandboxStateValue, _Mapping]] = ..., label_selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListPodSandboxRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: PodSandboxFilter
    def __init__(self, filter: _Optional[_Union[PodSandboxFilter, _Mapping]] = ...) -> None: ...

class PodSandbox(_message.Message):
    __slots__ = ("id", "metadata", "state", "created_at", "labels", "annotations", "runtime_handler")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_HANDLER_FIELD_NUMBER: _ClassVar[int]
    id: str
    metadata: PodSandboxMetadata
    state: PodSandboxState
    created_at: int
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    runtime_handler: str
    def __init__(self, id: _Optional[str] = ..., metadata: _Optional[_Union[PodSandboxMetadata, _Mapping]] = ..., state: _Optional[_Union[PodSandboxState, str]] = ..., created_at: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., runtime_handler: _Optional[str] = ...) -> None: ...

class ListPodSandboxResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[PodSandbox]
    def __init__(self, items: _Optional[_Iterable[_Union[PodSandbox, _Mapping]]] = ...) -> None: ...

class LinuxContainerSecurityContext(_message.Message):
    __slots__ = ("privileged", "namespace_options", "readonly_rootfs")
    PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    READONLY_ROOTFS_FIELD_NUMBER: _ClassVar[int]
    privileged: bool
    namespace_options: NamespaceOption
    readonly_rootfs: bool
    def __init__(self, privileged: _Optional[bool] = ..., namespace_options: _Optional[_Union[NamespaceOption, _Mapping]] = ..., readonly_rootfs: _Optional[bool] = ...) -> None: ...

class LinuxContainerConfig(_message.Message):
    __slots__ = ("resources", "security_context")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SECURITY_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    resources: LinuxContainerResources
    security_context: LinuxContainerSecurityContext
    def __init__(self, resources: _Optional[_Union[LinuxContainerResources, _Mapping]] = ..., security_context: _Optional[_Union[LinuxContainerSecurityContext, _Mapping]] = ...) -> None: ...

class ContainerMetadata(_message.Message):
    __slots__ = ("name", "attempt")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    name: str
    attempt: int
    def __init__(self, name: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class ContainerConfig(_message.Message):
    __slots__ = ("metadata", "image", "command", "args", "working_dir", "envs", "labels", "annotations", "log_path", "linux")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    ENVS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    LINUX_FIELD_NUMBER: _ClassVar[int]
    metadata: ContainerMetadata
    image: ImageSpec
    command: _containers.RepeatedScalarFieldContainer[str]
    args: _containers.RepeatedScalarFieldContainer[str]
    working_dir: str
    envs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    log_path: str
    linux: LinuxContainerConfig
    def __init__(self, metadata: _Optional[_Union[ContainerMetadata, _Mapping]] = ..., image: _Optional[_Union[ImageSpec, _Mapping]] = ..., command: _Optional[_Iterable[str]] = ..., args: _Optional[_Iterable[str]] = ..., working_dir: _Optional[str] = ..., envs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., log_path: _Optional[str] = ..., linux: _Optional[_Union[LinuxContainerConfig, _Mapping]] = ...) -> None: ...

class CreateContainerRequest(_message.Message):
    __slots__ = ("pod_sandbox_id", "config", "sandbox_config")
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_CONFIG_FIELD_NUMBER: _ClassVar[int]
    pod_sandbox_id: str
    config: ContainerConfig
    sandbox_config: PodSandboxConfig
    def __init__(self, pod_sandbox_id: _Optional[str] = ..., config: _Optional[_Union[ContainerConfig, _Mapping]] = ..., sandbox_config: _Optional[_Union[PodSandboxConfig, _Mapping]] = ...) -> None: ...

class CreateContainerResponse(_message.Message):
    __slots__ = ("container_id",)
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    def __init__(self, container_id: _Optional[str] = ...) -> None: ...

class StartContainerRequest(_message.Message):
    __slots__ = ("container_id",)
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    def __init__(self, container_id: _Optional[str] = ...) -> None: ...

class StartContainerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StopContainerRequest(_message.Message):
    __slots__ = ("container_id", "timeout")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    timeout: int
    def __init__(self, container_id: _Optional[str] = ..., timeout: _Optional[int] = ...) -> None: ...

class StopContainerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RemoveContainerRequest(_message.Message):
    __slots__ = ("container_id",)
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    def __init__(self, container_id: _Optional[str] = ...) -> None: ...

class RemoveContainerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ContainerStateValue(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: ContainerState
    def __init__(self, state: _Optional[_Union[ContainerState, str]] = ...) -> None: ...

class ContainerFilter(_message.Message):
    __slots__ = ("id", "state", "pod_sandbox_id", "label_selector")
    class LabelSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: ContainerStateValue
    pod_sandbox_id: str
    label_selector: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[ContainerStateValue, _Mapping]] = ..., pod_sandbox_id: _Optional[str] = ..., label_selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListContainersRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: ContainerFilter
    def __init__(self, filter: _Optional[_Union[ContainerFilter, _Mapping]] = ...) -> None: ...

class Container(_message.Message):
    __slots__ = ("id", "pod_sandbox_id", "metadata", "image", "image_ref", "state", "created_at", "labels", "annotations", "image_id")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_REF_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    pod_sandbox_id: str
    metadata: ContainerMetadata
    image: ImageSpec
    image_ref: str
    state: ContainerState
    created_at: int
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    image_id: str
    def __init__(self, id: _Optional[str] = ..., pod_sandbox_id: _Optional[str] = ..., metadata: _Optional[_Union[ContainerMetadata, _Mapping]] = ..., image: _Optional[_Union[ImageSpec, _Mapping]] = ..., image_ref: _Optional[str] = ..., state: _Optional[_Union[ContainerState, str]] = ..., created_at: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., image_id: _Optional[str] = ...) -> None: ...

class ListContainersResponse(_message.Message):
    __slots__ = ("containers",)
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    containers: _containers.RepeatedCompositeFieldContainer[Container]
    def __init__(self, containers: _Optional[_Iterable[_Union[Container, _Mapping]]] = ...) -> None: ...

class ContainerStatusRequest(_message.Message):
    __slots__ = ("container_id", "verbose")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    VERBOSE_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    verbose: bool
    def __init__(self, container_id: _Optional[str] = ..., verbose: _Optional[bool] = ...) -> None: ...

class ContainerStatus(_message.Message):
    __slots__ = ("id", "metadata", "state", "created_at", "started_at", "finished_at", "exit_code", "image", "image_ref", "reason", "message", "labels", "annotations", "log_path", "image_id")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_REF_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    metadata: ContainerMetadata
    state: ContainerState
    created_at: int
    started_at: int
    finished_at: int
    exit_code: int
    image: ImageSpec
    image_ref: str
    reason: str
    message: str
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    log_path: str
    image_id: str
    def __init__(self, id: _Optional[str] = ..., metadata: _Optional[_Union[ContainerMetadata, _Mapping]] = ..., state: _Optional[_Union[ContainerState, str]] = ..., created_at: _Optional[int] = ..., started_at: _Optional[int] = ..., finished_at: _Optional[int] = ..., exit_code: _Optional[int] = ..., image: _Optional[_Union[ImageSpec, _Mapping]] = ..., image_ref: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., log_path: _Optional[str] = ..., image_id: _Optional[str] = ...) -> None: ...

class ContainerStatusResponse(_message.Message):
    __slots__ = ("status", "info")
    class InfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    status: ContainerStatus
    info: _containers.ScalarMap[str, str]
    def __init__(self, status: _Optional[_Union[ContainerStatus, _Mapping]] = ..., info: _Optional[_Mapping[str, str]] = ...) -> None: ...

class FilesystemIdentifier(_message.Message):
    __slots__ = ("mountpoint",)
    MOUNTPOINT_FIELD_NUMBER: _ClassVar[int]
    mountpoint: str
    def __init__(self, mountpoint: _Optional[str] = ...) -> None: ...

class FilesystemUsage(_message.Message):
    __slots__ = ("timestamp", "fs_id", "used_bytes", "inodes_used")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    FS_ID_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    INODES_USED_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    fs_id: FilesystemIdentifier
    used_bytes: UInt64Value
    inodes_used: UInt64Value
    def __init__(self, timestamp: _Optional[int] = ..., fs_id: _Optional[_Union[FilesystemIdentifier, _Mapping]] = ..., used_bytes: _Optional[_Union[UInt64Value, _Mapping]] = ..., inodes_used: _Optional[_Union[UInt64Value, _Mapping]] = ...) -> None: ...

class ContainerStatsFilter(_message.Message):
    __slots__ = ("id", "pod_sandbox_id", "label_selector")
    class LabelSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    id: str
    pod_sandbox_id: str
    label_selector: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., pod_sandbox_id: _Optional[str] = ..., label_selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListContainerStatsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: ContainerStatsFilter
    def __init__(self, filter: _Optional[_Union[ContainerStatsFilter, _Mapping]] = ...) -> None: ...

class ContainerAttributes(_message.Message):
    __slots__ = ("id", "metadata", "labels", "annotations")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    id: str
    metadata: ContainerMetadata
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., metadata: _Optional[_Union[ContainerMetadata, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CpuUsage(_message.Message):
    __slots__ = ("timestamp", "usage_core_nano_seconds", "usage_nano_cores")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    USAGE_CORE_NANO_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USAGE_NANO_CORES_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    usage_core_nano_seconds: UInt64Value
    usage_nano_cores: UInt64Value
    def __init__(self, timestamp: _Optional[int] = ..., usage_core_nano_seconds: _Optional[_Union[UInt64Value, _Mapping]] = ..., usage_nano_cores: _Optional[_Union[UInt64Value, _Mapping]] = ...) -> None: ...

class MemoryUsage(_message.Message):
    __slots__ = ("timestamp", "working_set_bytes", "available_bytes", "usage_bytes", "rss_bytes", "page_faults", "major_page_faults")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    WORKING_SET_BYTES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    USAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAGE_FAULTS_FIELD_NUMBER: _ClassVar[int]
    MAJOR_PAGE_FAULTS_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    working_set_bytes: UInt64Value
    available_bytes: UInt64Value
    usage_bytes: UInt64Value
    rss_bytes: UInt64Value
    page_faults: UInt64Value
    major_page_faults: UInt64Value
    def __init__(self, timestamp: _Optional[int] = ..., working_set_bytes: _Optional[_Union[UInt64Value, _Mapping]] = ..., available_bytes: _Optional[_Union[UInt64Value, _Mapping]] = ..., usage_bytes: _Optional[_Union[UInt64Value, _Mapping]] = ..., rss_bytes: _Optional[_Union[UInt64Value, _Mapping]] = ..., page_faults: _Optional[_Union[UInt64Value, _Mapping]] = ..., major_page_faults: _Optional[_Union[UInt64Value, _Mapping]] = ...) -> None: ...

class ContainerStats(_message.Message):
    __slots__ = ("attributes", "cpu", "memory", "writable_layer")
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_LAYER_FIELD_NUMBER: _ClassVar[int]
    attributes: ContainerAttributes
    cpu: CpuUsage
    memory: MemoryUsage
    writable_layer: FilesystemUsage
    def __init__(self, attributes: _Optional[_Union[ContainerAttributes, _Mapping]] = ..., cpu: _Optional[_Union[CpuUsage, _Mapping]] = ..., memory: _Optional[_Union[MemoryUsage, _Mapping]] = ..., writable_layer: _Optional[_Union[FilesystemUsage, _Mapping]] = ...) -> None: ...

class ListContainerStatsResponse(_message.Message):
    __slots__ = ("stats",)
    STATS_FIELD_NUMBER: _ClassVar[int]
    stats: _containers.RepeatedCompositeFieldContainer[ContainerStats]
    def __init__(self, stats: _Optional[_Iterable[_Union[ContainerStats, _Mapping]]] = ...) -> None: ...

class ImageFilter(_message.Message):
    __slots__ = ("image",)
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    image: ImageSpec
    def __init__(self, image: _Optional[_Union[ImageSpec, _Mapping]] = ...) -> None: ...

class ListImagesRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: ImageFilter
    def __init__(self, filter: _Optional[_Union[ImageFilter, _Mapping]] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("id", "repo_tags", "repo_digests", "size")
    ID_FIELD_NUMBER: _ClassVar[int]
    REPO_TAGS_FIELD_NUMBER: _ClassVar[int]
    REPO_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    id: str
    repo_tags: _containers.RepeatedScalarFieldContainer[str]
    repo_digests: _containers.RepeatedScalarFieldContainer[str]
    size: int
    def __init__(self, id: _Optional[str] = ..., repo_tags: _Optional[_Iterable[str]] = ..., repo_digests: _Optional[_Iterable[str]] = ..., size: _Optional[int] = ...) -> None: ...

class ListImagesResponse(_message.Message):
    __slots__ = ("images",)
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedCompositeFieldContainer[Image]
    def __init__(self, images: _Optional[_Iterable[_Union[Image, _Mapping]]] = ...) -> None: ...

class ImageFsInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ImageFsInfoResponse(_message.Message):
    __slots__ = ("image_filesystems", "container_filesystems")
    IMAGE_FILESYSTEMS_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FILESYSTEMS_FIELD_NUMBER: _ClassVar[int]
    image_filesystems: _containers.RepeatedCompositeFieldContainer[FilesystemUsage]
    container_filesystems: _containers.RepeatedCompositeFieldContainer[FilesystemUsage]
    def __init__(self, image_filesystems: _Optional[_Iterable[_Union[FilesystemUsage, _Mapping]]] = ..., container_filesystems: _Optional[_Iterable[_Union[FilesystemUsage, _Mapping]]] = ...) -> None: ...
