"""Image references as the engines read them: the distribution reference grammar, in one place.

``NAME[:TAG][@DIGEST]``: a name is an optional registry host (``registry.example:5000``) and a repository path of
lowercase components joined by ``/``, each letters and digits with single separators (``.``, ``_``, ``__`` or a
run of ``-``), 255 characters at most; a tag is 1-128 of ``[A-Za-z0-9_.-]`` not starting with ``.`` or ``-``; a
digest is ``sha256:`` and 64 hex digits (sha384, sha512: 96, 128). Docker, containerd, Podman and the kubelet all
refuse anything else, the kubelet only once the pod is scheduled: orch refuses it first, in one line, naming the
flag. Standard library only, so the spec can check ``--image`` without loading an engine's client.
"""
from __future__ import annotations

import re
from typing import Optional

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?")
NAME = re.compile(_NAME)
NAME_MAX = 255
DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}  # the algorithms engines know, and their lengths


def problem(reference: str) -> Optional[str]:
    """Why ``reference`` is not an image reference an engine reads, or None if it is one."""
    match = REFERENCE.fullmatch(reference)
    if match is None:
        return _why(reference)
    name, digest = match.group("name"), match.group("digest")
    if len(name) > NAME_MAX:
        return f"its name is {len(name)} characters, over {NAME_MAX}"
    if re.fullmatch(r"[a-f0-9]{64}", name):
        return "a name of 64 hex digits reads as an image id"
    if digest is not None:
        algorithm, _, hex_digits = digest.partition(":")
        if DIGEST_HEX.get(algorithm) != len(hex_digits):
            return (f"its digest is not sha256: and 64 hex digits (an engine knows "
                    f"{', '.join(f'{a}: {n}' for a, n in DIGEST_HEX.items())})")
    return None


def _why(reference: str) -> str:
    """What is wrong with a reference the grammar refuses, as precisely as can be said."""
    if not reference:
        return "it is empty"
    if any(c.isspace() or not c.isprintable() for c in reference):
        return "it holds a space or a control character"
    rest, at, digest = reference.partition("@")
    if at and not re.fullmatch(_DIGEST, digest):
        return "its digest is not ALGORITHM:HEX, e.g. sha256: and 64 hex digits"
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    name, tag = (rest[:colon], rest[colon + 1:]) if colon > slash else (rest, None)
    if tag is not None and not re.fullmatch(_TAG, tag):
        return "its tag must be 1-128 letters, digits, _, . or -, not starting with . or -"
    first, _, path = name.partition("/")
    if not path or not (re.fullmatch(_DOMAIN, first) and ("." in first or ":" in first or first == "localhost"
                                                            or first != first.lower())):
        path = name  # no registry host in front: the whole name is the repository path
    if path != path.lower():
        return f"its repository path ({path}) must be lowercase"
    return ("its repository path must be components of lowercase letters and digits joined by /, each with single "
            "separators (., _, __ or -)")


def check(reference: str, field: str) -> str:
    """``reference`` if it is an image reference an engine reads; else ValueError, one line that starts with the
    ``field`` (or flag) it came from and says why."""
    why = problem(reference)
    if why is not None:
        raise ValueError(f"{field}: {reference[:120]!r} is not an image reference engines read: {why}")
    return reference


def name_problem(name: str) -> Optional[str]:
    """Why ``name`` (a registry and repository path, as ``--registry``'s HOST/PATH) cannot start an image's name,
    or None if ``name/<image>`` reads as the image under it."""
    if not NAME.fullmatch(f"{name}/x"):
        return _why(f"{name}/x")
    return None
