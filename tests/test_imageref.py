"""Image references as the engines read them (the distribution reference grammar): the one checker, what it refuses
and why, every flag that takes an image, and every image name orch makes."""
from __future__ import annotations

import pytest

from orchestrator import contract, frameworks, imageref
from orchestrator.errors import InvalidSpec
from orchestrator.images.recipe import BuildOptions
from orchestrator.images import data as data_images
from orchestrator.images import script as script_images
from orchestrator.images import user as user_images
from orchestrator.jobspec import make_spec
from tests.test_cli_inprocess import one_line_error, orch

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize("reference", [
    "busybox", "busybox:1.36", "library/busybox", "docker.io/library/busybox:latest", f"busybox@{DIGEST}",
    f"busybox:1@{DIGEST}", "localhost/x", "localhost:5000/team/x:v1.2_3-rc", "registry.example:5000/ml/trainer:1",
    "Registry.Example/ml/x", "UP/x", "[::1]:5000/x:1", "a__b/c-d---e.f_g:TAG_1", "x:" + "t" * 128,
    "a/" * 100 + "b", f"x@sha512:{'0' * 128}", "127.0.0.1:5000/x",
])
def test_references_engines_read_pass(reference):
    assert imageref.problem(reference) is None
    assert imageref.check(reference, "--image") == reference


@pytest.mark.parametrize("reference, why", [
    ("UPPER/Img:tag", "its repository path (Img) must be lowercase"),
    ("Busybox", "its repository path (Busybox) must be lowercase"),
    ("reg.example/Team/x", "its repository path (Team/x) must be lowercase"),
    ("", "it is empty"),
    ("a b", "a space or a control character"),
    ("x\n", "a space or a control character"),
    ("x:.tag", "its tag must be 1-128"),
    ("x:" + "t" * 129, "its tag must be 1-128"),
    ("x:", "its tag must be 1-128"),
    ("x@sha256:abc", "its digest is not ALGORITHM:HEX"),
    ("x@sha256:" + "a" * 63, "its digest is not sha256: and 64 hex digits"),
    ("x@md5:" + "a" * 32, "its digest is not sha256: and 64 hex digits"),
    ("a..b", "single separators"),
    ("a___b", "single separators"),
    ("-a", "single separators"),
    ("a-", "single separators"),
    ("a//b", "single separators"),
    ("a/b/", "single separators"),
    ("f" * 64, "64 hex digits reads as an image id"),
    ("a/" * 128 + "b", "over 255"),
])
def test_references_engines_refuse_are_refused_saying_why(reference, why):
    assert why in (imageref.problem(reference) or "")
    with pytest.raises(ValueError) as caught:
        imageref.check(reference, "--image")
    assert str(caught.value).startswith("--image: ") and why in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("backend", ["compose", "swarm", "k8s"])
def test_a_bad_image_exits_2_in_one_line_naming_the_flag_before_anything_is_rendered(backend):
    one_line_error(orch("render", "--backend", backend, "--image", "UPPER/Img:tag", "--run-id", "r"), 2,
                   "--image: 'UPPER/Img:tag' is not an image reference engines read: its repository path (Img) must "
                   "be lowercase")
    with pytest.raises(InvalidSpec, match="image: 'UPPER/Img:tag'"):
        make_spec(backend=backend, run_id="r", image="UPPER/Img:tag")


def test_a_registry_that_cannot_start_an_images_name_is_refused():
    one_line_error(orch("render", "--backend", "k8s", "--registry", "reg.example/ml..x", "--run-id", "r"), 2,
                   "--registry: 'reg.example/ml..x' cannot start an image's name")
    assert imageref.name_problem("registry.example:5000") is None and imageref.name_problem("reg.example/ml") is None


def test_the_build_and_push_flags_that_take_an_image_are_checked():
    with pytest.raises(InvalidSpec, match="--base: 'Bad Base' is not an image reference"):
        BuildOptions(base="Bad Base")
    with pytest.raises(InvalidSpec, match="--build-base: 'x:.y' is not an image reference"):
        BuildOptions(build_base="x:.y")
    one_line_error(orch("build", "--base", "python:3.11 slim"), 2, "--base: 'python:3.11 slim' is not")
    one_line_error(orch("push", "--context", "n2", "--image", "up/X"), 2, "--image: 'up/X' is not")


def test_every_image_name_orch_makes_reads_as_a_reference():
    names = []
    for name in frameworks.names():
        framework = frameworks.get(name)
        names += [*framework.image_refs(), framework.main_image()]
        names.append(user_images.image_for(b"numpy==2.0\n", name))
    base = frameworks.get(frameworks.DEFAULT).main_image()
    names += [data_images.data_image(d) for d in contract.DATASET_KINDS]
    names += [data_images.with_data(base, d) for d in contract.DATASET_KINDS]
    names += [script_images.loaders_image(base), script_images.script_image("a" * 63),
              script_images.script_image("ends_with_underscore_")]
    for image in names:
        assert imageref.problem(image) is None, image
        assert imageref.problem(f"registry.example:5000/ml/{image}") is None, image
