"""Test your own policy: the conformance checks every pricing policy must pass.

>>> from warmfit.testing import check_policy, parametrize_with_checks
"""

from warmfit.testing.checks import check_policy, parametrize_with_checks

__all__ = ["check_policy", "parametrize_with_checks"]
