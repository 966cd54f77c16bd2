"""What an Astronomer deployment builds from stays in step with what the tests run on:
the Dockerfile's Astro Runtime is for the Airflow minor version requirements.txt pins and
for bin/setup's Python, and packages.txt brings the Java runtime PySpark needs. (No image
is built here: these files are read, as the Astro CLI would.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# PySpark 4 runs on Java 17 or 21 (bin/setup checks the same for the local JVM).
SUPPORTED_JAVA = (17, 21)


def pinned(name: str) -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        match = re.fullmatch(rf"{re.escape(name)}(\[[^\]]*\])?==(\S+)", line.strip())
        if match:
            return match.group(2)
    raise AssertionError(f"requirements.txt does not pin {name}")


def runtime_image() -> re.Match[str]:
    froms = [
        line.split()[1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("FROM ")
    ]
    assert len(froms) == 1, froms
    match = re.fullmatch(
        r"astrocrpublic\.azurecr\.io/runtime:(\d+)\.(\d+)-(\d+)(?:-python-(\d+\.\d+))?",
        froms[0],
    )
    assert match, f"{froms[0]} is not an Astro Runtime 3 image"
    return match


def test_the_runtime_is_for_the_airflow_minor_version_requirements_pin() -> None:
    image = runtime_image()
    major, minor, _patch = pinned("apache-airflow").split(".")
    assert (image.group(1), image.group(2)) == (major, minor)


def test_the_runtime_python_is_the_one_the_constraints_were_resolved_for() -> None:
    setup = (ROOT / "bin" / "setup").read_text()
    assert "python3.11" in setup
    assert runtime_image().group(4) == "3.11"


def test_packages_bring_a_java_runtime_pyspark_supports() -> None:
    packages = (ROOT / "packages.txt").read_text().split()
    java = [p for p in packages if re.fullmatch(r"openjdk-\d+-jre(-headless)?", p)]
    assert len(java) == 1, packages
    assert int(java[0].split("-")[1]) in SUPPORTED_JAVA
    assert pinned("pyspark").startswith("4.")


def test_every_runtime_requirement_is_pinned_exactly() -> None:
    # The runtime image pip-installs requirements.txt as it is: a range would let a
    # deployment resolve other versions than the tests ran with.
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            assert re.fullmatch(r"[A-Za-z0-9_.-]+(\[[^\]]*\])?==[^=<>~!]+", line), line
