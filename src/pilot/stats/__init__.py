"""The preregistered statistics: estimators, tests, sensitivities and the power simulation.

Import what you need from its module (``pilot.stats.power``,
``pilot.stats.bootstrap``, ...); this package file stays light on purpose.
"""
