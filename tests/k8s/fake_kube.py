"""Deprecated (one release): moved to :mod:`tests.support.fake_kube`."""

from tests.support.fake_kube import *
from tests.support.fake_kube import __all__  # noqa: F401
