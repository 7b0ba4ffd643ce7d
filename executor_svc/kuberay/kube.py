"""The Kubernetes API as the kuberay executor uses it (the official `kubernetes` client).

Calls block: the executor runs them in threads. Every failure leaves here as a StarForge error
carrying the API server's own words: unreachable or refusing the executor's credentials ->
Unavailable; schema validation (422) or a strict-decoding refusal (400) -> InvalidArgument with
the offending field paths; a missing RayJob resource type -> Unavailable naming the CRD. A missing
object is not an error: the methods return None / False for it.

Requests are created with fieldValidation=Strict: a field the cluster's CRD does not know is
refused (400) rather than silently pruned, so an operator older than this executor cannot run a
job with part of its spec quietly dropped.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import urllib3
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from common import errors
from executor_svc.kuberay.builder import GROUP, PLURAL, VERSION
from executor_svc.kuberay.config import KubeRayConfig

CONNECT_TIMEOUT_SECONDS = 5.0
_ERRNO = re.compile(r"\[Errno -?[0-9]+\] [^'\")]+")
_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')


class NoPodsApi(errors.Unavailable):
    """The API server serves no core/v1 Pods (a CustomResource-only server)."""


class ResourceExpired(Exception):
    """A watch's resourceVersion was compacted away (410 Gone): list again."""


def _reason(exc: BaseException) -> str:
    """The short cause of a connection failure ("[Errno 111] Connection refused")."""
    text = str(getattr(exc, "reason", None) or exc)
    found = _ERRNO.findall(text)
    return found[-1].strip() if found else text[:300]


def _status_body(exc: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _as_dict(value: object) -> dict[str, Any]:
    """A custom-object answer (the client returns plain dicts for custom resources)."""
    return value if isinstance(value, dict) else {}


def is_missing(exc: ApiException, name: str) -> bool:
    """True when a 404 is about the named object (not about the resource type)."""
    details = _status_body(exc).get("details") or {}
    return exc.status == 404 and details.get("name") == name


def translate(exc: BaseException, host: str, action: str) -> errors.StarforgeError:
    """A failed API call as the error the executor reports."""
    if isinstance(exc, ApiException):
        body = _status_body(exc)
        message = str(body.get("message") or exc.reason or "").strip()
        if exc.status in (400, 422):
            causes = (body.get("details") or {}).get("causes") or []
            fields = [(str(c.get("field") or ""), str(c.get("message") or "")) for c in causes if c.get("field")]
            fields += [(f, "unknown field") for f in _UNKNOWN_FIELD.findall(message)]
            return errors.InvalidArgument(
                f"{action}: the Kubernetes API refused the object: {message}",
                field_violations=tuple(errors.FieldViolation(f, why) for f, why in fields if f != "<nil>"),
            )
        if exc.status in (401, 403):
            return errors.Unavailable(
                f"{action}: the Kubernetes API at {host} refused the executor's credentials "
                f"({exc.status}): {message}; check kuberay.kubeconfig and the service account's RBAC"
            )
        if exc.status == 404:
            return errors.Unavailable(
                f"{action}: the Kubernetes API at {host} answered 404 ({message}); is KubeRay's "
                f"RayJob CRD ({PLURAL}.{GROUP}, {VERSION}) installed?"
            )
        return errors.Unavailable(f"{action}: the Kubernetes API at {host} answered {exc.status}: {message}")
    return errors.Unavailable(f"{action}: the Kubernetes API at {host} cannot be reached: {_reason(exc)}")


def load_client(cfg: KubeRayConfig) -> client.ApiClient:
    """An ApiClient from the kubeconfig (or in-cluster); Unavailable with the reason when it fails."""
    conf = client.Configuration()
    try:
        if cfg.kubeconfig:
            path = os.path.expanduser(cfg.kubeconfig)
            if not os.path.isfile(path):
                raise errors.Unavailable(f"kuberay.kubeconfig {path} does not exist or is not a file")
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=cfg.context or None, client_configuration=conf, persist_config=False
            )
        elif not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise errors.Unavailable(
                "kuberay.kubeconfig is empty, so the executor uses the in-cluster service account, "
                "but KUBERNETES_SERVICE_HOST is not set (not running in a pod); set kuberay.kubeconfig"
            )
        else:
            kube_config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
    except errors.StarforgeError:
        raise
    except Exception as exc:  # ConfigException, YAML and file errors: all mean "fix the kubeconfig"
        where = cfg.kubeconfig or "in-cluster configuration"
        raise errors.Unavailable(f"cannot load the Kubernetes client configuration from {where}: {exc}") from None
    # Connection errors are retried twice, never a request the server may have executed.
    conf.retries = urllib3.Retry(total=2, connect=2, read=0, status=0, other=0, backoff_factor=0.1)
    return client.ApiClient(conf)


class KubeApi:
    """RayJobs (and Secrets) in one namespace. Thread-safe; every call has a deadline."""

    def __init__(self, api_client: client.ApiClient, namespace: str, timeout_seconds: float) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.timeout = (CONNECT_TIMEOUT_SECONDS, timeout_seconds)
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    @classmethod
    def from_config(cls, cfg: KubeRayConfig) -> KubeApi:
        return cls(load_client(cfg), cfg.namespace, cfg.api_timeout_seconds)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def _call(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, _request_timeout=self.timeout, **kwargs)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, self.host, action) from None

    # -- RayJobs ----------------------------------------------------------------------------

    def create_rayjob(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The created object, or None when one of that name exists (409)."""
        try:
            return _as_dict(
                self.custom.create_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    body,
                    field_validation="Strict",
                    _request_timeout=self.timeout,
                )
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise translate(exc, self.host, f"create RayJob {self.namespace}/{body['metadata']['name']}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, self.host, "create RayJob") from None

    def get_rayjob(self, name: str) -> dict[str, Any] | None:
        try:
            obj = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if is_missing(exc, name):
                return None
            raise translate(exc, self.host, f"get RayJob {self.namespace}/{name}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, self.host, f"get RayJob {self.namespace}/{name}") from None
        return _as_dict(obj)

    def list_rayjobs(self, selector: str, limit: int | None = None) -> tuple[list[dict[str, Any]], str]:
        """(items, resourceVersion of the list) of RayJobs matching the label selector."""
        kwargs: dict[str, Any] = {"label_selector": selector}
        if limit:
            kwargs["limit"] = limit
        found = self._call(
            f"list RayJobs in {self.namespace}",
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            **kwargs,
        )
        found = _as_dict(found)
        version = str((found.get("metadata") or {}).get("resourceVersion", ""))
        return [_as_dict(i) for i in found.get("items") or []], version

    def delete_rayjob(self, name: str) -> dict[str, Any] | None:
        """Delete with propagationPolicy Foreground (the object stays, with deletionTimestamp, until
        the garbage collector has removed its RayCluster and pods). None when it did not exist."""
        try:
            out = self.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                body=client.V1DeleteOptions(propagation_policy="Foreground"),
                _request_timeout=self.timeout,
            )
        except ApiException as exc:
            if is_missing(exc, name):
                return None
            raise translate(exc, self.host, f"delete RayJob {self.namespace}/{name}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, self.host, f"delete RayJob {self.namespace}/{name}") from None
        return _as_dict(out)

    def watch_rayjobs(self, selector: str, resource_version: str, timeout_seconds: int) -> Any:
        """An open watch response (urllib3) from `resource_version`; the caller reads and closes it."""
        try:
            return self.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                label_selector=selector,
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _preload_content=False,
                # The server ends the watch after timeout_seconds; the read deadline is a backstop.
                _request_timeout=(CONNECT_TIMEOUT_SECONDS, timeout_seconds + 30),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise ResourceExpired(str(exc.reason)) from None
            raise translate(exc, self.host, "watch RayJobs") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, self.host, "watch RayJobs") from None

    # -- Pods (the image digest) ------------------------------------------------------------

    def read_pod(self, name: str) -> dict[str, Any] | None:
        """The pod as the API serves it (JSON field names), or None when there is no such pod.
        NoPodsApi when the server has no Pods at all."""
        action = f"read Pod {self.namespace}/{name}"
        try:
            # _preload_content=False: the raw answer (urllib3), read as the API's JSON.
            answer: Any = self.core.read_namespaced_pod(
                name, self.namespace, _preload_content=False, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if is_missing(exc, name):
                return None
            if exc.status == 404:
                raise NoPodsApi(
                    f"{action}: the Kubernetes API at {self.host} serves no core/v1 Pods "
                    f"({_status_body(exc).get('message') or exc.reason})"
                ) from None
            raise translate(exc, self.host, action) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, self.host, action) from None
        try:
            return _as_dict(json.loads(answer.data))
        except ValueError as exc:
            raise errors.Unavailable(f"{action}: the answer is not JSON: {exc}") from None

    # -- Secrets (use_secret_for_token) -----------------------------------------------------

    def put_secret(self, name: str, data: dict[str, str], labels: dict[str, str]) -> None:
        """Create the Secret, or replace it when a failed launch left it behind."""
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name, labels=labels), type="Opaque", string_data=data)
        action = f"create Secret {self.namespace}/{name}"
        try:
            self.core.create_namespaced_secret(self.namespace, body, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status != 409:
                raise self._secret_error(exc, action) from None
            self._call(action, self.core.replace_namespaced_secret, name, self.namespace, body)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, self.host, action) from None

    def own_secret(self, name: str, owner: dict[str, Any]) -> None:
        """Make the RayJob the Secret's owner, so deleting the RayJob deletes the Secret too."""
        meta = owner["metadata"]
        ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RayJob", "name": meta["name"], "uid": meta["uid"]}
        self._call(
            f"patch Secret {self.namespace}/{name}",
            self.core.patch_namespaced_secret,
            name,
            self.namespace,
            {"metadata": {"ownerReferences": [ref]}},
        )

    def delete_secret(self, name: str) -> bool:
        """True when a Secret was deleted, False when there was none."""
        try:
            self.core.delete_namespaced_secret(name, self.namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if is_missing(exc, name):
                return False
            raise self._secret_error(exc, f"delete Secret {self.namespace}/{name}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, self.host, f"delete Secret {self.namespace}/{name}") from None
        return True

    def _secret_error(self, exc: ApiException, action: str) -> errors.StarforgeError:
        if exc.status == 404:
            return errors.Unavailable(
                f"{action}: the Kubernetes API at {self.host} serves no core/v1 Secrets "
                f"({_status_body(exc).get('message') or exc.reason}); set kuberay.use_secret_for_token: false "
                "on servers without the core API"
            )
        return translate(exc, self.host, action)

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]
