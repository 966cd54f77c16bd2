"""PySpark's numpy converters for py4j, without their pandas and pyarrow.

py4j asks each input converter of every argument passed into the JVM whether it converts
it; PySpark's numpy converters (``pyspark.sql.types``) answer by importing
``pyspark.testing.utils`` to learn whether numpy is installed, and that module imports
pandas and pyarrow to check their versions: 84 MiB of a bare driver's 115 MiB, at the
first call into the JVM, held for the whole cycle beside the survey's listing and
references. ledger-gc's drivers hand pandas nothing.

``lean`` puts converters that ask the same question in place of PySpark's: an object is a
numpy object only if numpy is imported (``sys.modules``), which needs no import at all.
The conversion itself is PySpark's.
"""

from __future__ import annotations

import sys
from typing import Any


class _LeanNumpy:
    """One of PySpark's numpy converters, asked without importing anything."""

    def __init__(self, converter: Any, array: bool) -> None:
        self.converter = converter
        self.array = array

    def can_convert(self, obj: object) -> bool:
        numpy = sys.modules.get("numpy")
        if numpy is None:
            return False  # (no numpy object exists before numpy is imported)
        if self.array:
            return isinstance(obj, numpy.ndarray) and obj.ndim == 1
        return isinstance(obj, numpy.generic)

    def convert(self, obj: object, gateway_client: Any) -> Any:
        return self.converter.convert(obj, gateway_client)


def lean() -> None:
    """Replace PySpark's numpy converters in py4j's list (once; a remote-only PySpark
    registers none)."""
    from py4j import protocol
    from pyspark.sql import types

    kinds = {
        kind: array
        for name, array in (("NumpyArrayConverter", True), ("NumpyScalarConverter", False))
        if (kind := getattr(types, name, None)) is not None  # (another PySpark: as it is)
    }
    protocol.INPUT_CONVERTER[:] = [
        _LeanNumpy(converter, kinds[type(converter)]) if type(converter) in kinds else converter
        for converter in protocol.INPUT_CONVERTER
    ]
