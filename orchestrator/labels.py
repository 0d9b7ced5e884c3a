"""The names orch gives what it makes, shared by the plan, the backends and the image builder."""

LABEL_RUN = "orch.run"
LABEL_ROLE = "orch.role"
LABEL_INDEX = "orch.index"
LABEL_INPUTS = "orch.inputs"
LABEL_KIND = "orch.kind"
LABEL_STACK = "com.docker.stack.namespace"  # set by `docker stack deploy` on a stack's services and networks
