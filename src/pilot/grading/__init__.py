"""Expert grading of a study's packages: the deferred calibration wave (A-005).

A grading wave draws finished runs of a study (all, or a stratified sample),
assigns each package to K graders of its scenario's occupation in a balanced
incomplete design (:mod:`pilot.grading.assignment`), stores the plan in the
study's own SQLite store beside, never inside, the LLM judges' records
(:mod:`pilot.grading.store`), serves the blind grading site
(:mod:`pilot.grading.site`) and compares the experts' grades with the panel
(:mod:`pilot.grading.agreement`, :mod:`pilot.grading.report`).

Data flows one way: graders file -> plan -> grades -> report.
"""
