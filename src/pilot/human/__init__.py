"""The human wave: participants H0 (no AI) and H1 (a metered conversational assistant) on the agents' bundles.

A wave is made from a participants file (:mod:`pilot.human.participants`):
each eligible participant is randomised between the conditions within their
occupation by a seeded permutation and given a scenario
(:mod:`pilot.human.assignment`); the plan, the sign-in hashes and the
sessions live in the study's own store beside its tables
(:mod:`pilot.human.store`), and each participant's contact stays in one
owner-only file outside it (:mod:`pilot.human.wave`). The participant site
(:mod:`pilot.human.site`) shows the consent first, then the bundle exactly as
the agents get it (:mod:`pilot.human.bundle`), keeps the clock, admits the
uploads by the oracle's own rules (:mod:`pilot.human.uploads`) and, in H1,
relays the assistant through the metering proxy
(:mod:`pilot.human.assistant`). A submitted session is an ordinary run of
the study (arm H0 or H1, backend ``human``), evaluated by the same oracle,
input-hash check and blind judges (:mod:`pilot.human.evaluate`), exported
with its time on task (:mod:`pilot.human.export`) and analysed beside the
agent arms (:mod:`pilot.human.analysis`). A participant who withdraws
leaves nothing but the record of the withdrawal (:mod:`pilot.human.withdraw`).

Data flows one way: participants file -> plan -> sessions -> runs -> table -> stage 07.
"""
