"""The one exception tree of envfarm.

    EnvfarmError
      TaskSpecError        a task directory is malformed (permanent; names file and field)
      ImageError           an image could not be built
        UnknownBaseImage   a Dockerfile names a base no alias fits
        TaskBuildError     the task's Dockerfile fails to build, and would again (permanent)
      SandboxError         provisioning, exec or file I/O failed (infrastructure)
        SandboxStartError  the environment never came up
          TaskConfigError  the engine refuses the environment as the task configures it (permanent)
          ServiceFailed    a task's service exited or failed its check the same way (permanent)
        SandboxGone        the sandbox died or vanished mid-episode
        EnvironmentUnsupported the task needs what the backend, as configured, lacks (permanent)
      PolicyError          the policy endpoint failed (infrastructure)
        PolicyConfigError  bad URL or unknown model: retrying cannot help
        PolicyResponseError the endpoint answered, but not with a usable completion
          RequestRejected  the server rejected the same request body twice in a row (never scored)
        ContextLengthExceeded the prompt no longer fits the model's context (the model's outcome)
      GradingError         the verifier could not produce a reward (reward invalid, never 0)
      KubeError            the Kubernetes API refused or failed a request (infrastructure)
        KubeNotFound       404: the object does not exist
        KubeConflict       409: it exists already, or a resourceVersion precondition failed
        KubeGone           410: a watch's resourceVersion is older than the server keeps
        KubeInvalid        422 (or 400): the object or request is malformed (permanent)
        KubeUnavailable    the server could not be reached or answered 429/5xx (transient)
      StoreError           the job store failed (database unreachable, bad URL, lost lease)
      JobError             a request about a job cannot be honoured (permanent)
        JobNotFound        no job has that id
        UnknownTask        a job names a task the server does not know
        InvalidJobState    the job's state does not allow it (e.g. resuming a cancelled job)
        SessionCapacity    every episode slot is taken: a step-API session must wait
      SessionAbandoned     a step-API session's trainer left before submitting (never graded)
      SessionEnded         an action arrived after a step-API session had ended
      BatteryError         an audit battery file is malformed (names file and field)

Foreign errors (docker, aiohttp, OS) are translated into this tree once, at the module that
wraps the foreign library, with ``raise ... from exc``. Above that boundary only these types
are caught. ``infrastructure`` marks faults that must never be scored (the reward is invalid);
``retryable`` tells the controller another attempt may succeed.
"""

from __future__ import annotations


class EnvfarmError(Exception):
    """Base of every error envfarm raises on purpose."""

    infrastructure: bool = False
    retryable: bool = False


class TaskSpecError(EnvfarmError):
    """A task spec is invalid: the message names the file, the field and what is allowed."""

    def __init__(self, path: str, message: str, field: str | None = None) -> None:
        self.path = path
        self.field = field
        self.detail = message
        where = f"{path}: {field}" if field else path
        super().__init__(f"{where}: {message}")


class ImageError(EnvfarmError):
    infrastructure = True
    retryable = False
    signature: str | None = None
    """For a build whose ``RUN`` failed: its step and exit status. The same twice is the
    task's fault (``TaskBuildError``); None where the failure says nothing of the task."""


class UnknownBaseImage(ImageError):
    """A base image has no local alias; it cannot be pulled on a machine without a registry."""

    infrastructure = False


class TaskBuildError(ImageError):
    """The task's own Dockerfile fails to build, in a way building again cannot change: a
    missing ``COPY`` source, a line the engine cannot parse, a ``RUN`` that failed the same
    way twice (a host an offline machine cannot reach, a package that does not exist). The
    task's fault: its episodes end invalid, not as infrastructure errors, and are not retried."""

    infrastructure = False


class AgentInstallError(ImageError):
    """An installed agent could not be installed into the task's image twice in a row, or
    the image lacks a runtime it needs: bad input (exit 2), never scored."""

    infrastructure = False


class SandboxError(EnvfarmError):
    infrastructure = True
    retryable = True


class SandboxStartError(SandboxError):
    pass


class ServiceFailed(SandboxStartError):
    """A service the task defines exited before it was healthy, or its healthcheck failed the
    same way to the end: the task's fault, which another attempt would repeat."""

    infrastructure = False
    retryable = False


class TaskConfigError(SandboxStartError):
    """The engine refused the environment as the task configures it (an invalid limit, user or
    command): it will fail the same way again, so it is bad input, never retried."""

    infrastructure = False
    retryable = False


class SandboxGone(SandboxError):
    pass


class EnvironmentUnsupported(SandboxError):
    """The task asks for something this backend, as configured, cannot give it (the network
    under gVisor, an unregistered runtime): a bad input for this run, not a fault to retry."""

    infrastructure = False
    retryable = False


class PolicyError(EnvfarmError):
    infrastructure = True
    retryable = True


class PolicyConfigError(PolicyError):
    infrastructure = False
    retryable = False


class PolicyResponseError(PolicyError):
    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class RequestRejected(PolicyResponseError):
    """The server rejected a request body twice in a row (HTTP 4xx, or a 500 its own request
    parser raised): retrying, on this endpoint or another, cannot help and the endpoint is not
    at fault. The episode is invalid (``request_rejected``): never scored, not retried."""

    infrastructure = True
    retryable = False
    reason = "request_rejected"


class ContextLengthExceeded(PolicyError):
    """The server refused the prompt as longer than the model's context: the session ends
    with the ``context_length`` outcome and is graded (the model's limit, not a fault)."""

    infrastructure = False
    retryable = False


class GradingError(EnvfarmError):
    """The verifier crashed, timed out or wrote no reward: invalid, and not retried.

    ``output``: what the verifier left when it ran (a ``VerifierOutput``), so that the episode's
    artifacts keep it; None when it never ran."""

    infrastructure = True
    output: object | None = None


class StoreError(EnvfarmError):
    infrastructure = True
    retryable = True


class JobError(EnvfarmError):
    """A request about a job that cannot be honoured as asked; ``field`` names the culprit."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class JobNotFound(JobError):
    pass


class UnknownTask(JobError):
    pass


class InvalidJobState(JobError):
    pass


class SessionCapacity(JobError):
    """Every episode slot of the server is taken: a new driven session must wait."""


class SessionAbandoned(EnvfarmError):
    """A step-API session's trainer left before submitting (its connection closed, or it was
    idle too long). Neither envfarm's fault nor the model's: recorded, never graded."""


class SessionEnded(EnvfarmError):
    """An action arrived after the session's agent phase had ended."""


class BatteryError(EnvfarmError):
    """An audit battery (``envfarm audit --battery``) is malformed: the message names the
    file, the field and what is expected."""

    def __init__(self, path: str, message: str, field: str | None = None) -> None:
        self.path, self.field = path, field
        where = f"{path}: {field}" if field else path
        super().__init__(f"{where}: {message}")


class KubeError(EnvfarmError):
    """A Kubernetes API request failed; ``status`` and ``reason`` as the server said them.

    ``retryable`` tells a reconciler to retry with a delay (temporary) rather than record a
    condition with the reason (permanent)."""

    infrastructure = True
    retryable = False

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)


class KubeNotFound(KubeError):
    pass


class KubeConflict(KubeError):
    retryable = True


class KubeGone(KubeError):
    retryable = True


class KubeInvalid(KubeError):
    infrastructure = False


class KubeUnavailable(KubeError):
    retryable = True
