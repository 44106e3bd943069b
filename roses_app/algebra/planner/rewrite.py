"""Logical rewrites: the equivalences of seed 002 ("Propriétés des opérateurs
logiques") that still hold in our physical, event-driven semantics.

The seed proves its equivalences in the *logical* model, where a stream has a row at
every tick.  Our streams (:mod:`roses_app.algebra.reference.evaluator`, the oracle) only have
events, and the operators of time react to the timestamps present in their input:
a Window emits at the timestamps of its own input, δ compares with the previous
timestamp present.  So an equivalence is only used here when it survives that
change; tests/test_rewrite.py checks every rule on random event lists (heartbeats
included) and holds a counter-example for every equivalence refused.

RULES, applied by default (one small function each, in :mod:`.rewrite_rules`):

* ``flatten_unions``: associativity, (F1 ∪ F2) ∪ F3 = F1 ∪ F2 ∪ F3;
* ``drop_duplicate_inputs``: idempotence, F ∪ F = F;
* ``unwrap_single_union``: ∪(F) = F;
* ``merge_windows_in_union``: decomposition, ω_w1(F) ∪ … ∪ ω_wn(F) = ω_max(wi)(F)
  (time windows sharing period, start and delay; count windows);
* ``drop_identity_window``: ω_time,1 is ω0 (the cascade ω_time,1(ω_time,w(F)) =
  ω_time,w(F), and Window_ω0(f) = f);
* ``fuse_selections``: cascade, σ_p(σ_q(F)) = σ_{q ∧ p}(F), one XPath call, when
  both predicates run on the same XPath engine;
* ``push_selection_below_union``: σ(F1 ∪ F2) = σ(F1) ∪ σ(F2) (from the definitions
  of σ and ∪), when a copy of σ then fuses with a selection below.

Holds but not in RULES, because it never saves work here: ``push_map_below_union``,
μ(F1 ∪ F2) = μ(F1) ∪ μ(F2).

Refused (they do not hold for physical streams in general; counter-examples in the
tests):

* σ(ω_time(F)) = ω_time(σ(F)): the left side emits at every timestamp of F, the
  right one only at those of σ(F) (equal only if a heartbeat came at each of them);
* ω(μ(F)) = μ(ω(F)): an item mapped to λ takes its timestamp away;
* ω_time(F1 ∪ F2) = ω_time(F1) ∪ ω_time(F2), ω_w1(ω_w2(F)) = ω_w2(ω_w1(F)) and
  ω_w1(ω_w2(F)) = ω_w1+w2−1(F) for w1, w2 > 1: a Window emits at its own input's
  timestamps only;
* the δ laws: δ compares with the previous timestamp present, not the previous tick;
* σ_{p ∨ q}(F) = σ_p(F) ∪ σ_q(F), merging the right side: an item on which p fails
  with an error is dropped by ``(p) or (q)`` but kept by σ_q;
* ⋈_inner,p = σ_p(×): not even expressible (a join's predicate reads two items, a
  σ's one; our product keeps the λ-rows);
* as the seed says, σ(ω_count(F)) ≠ ω_count(σ(F)) and ω_count(F1 ∪ F2) ≠
  ω_count(F1) ∪ ω_count(F2): nothing crosses a count window.

Two physical facts every rule respects:

* a join, semijoin, diff, α or γ reads a Window input as a WindowCall (or as closed
  periodic windows): there a rewrite must not change the window its input is read
  through (``window_kind``), e.g. ∪(ω(F)) must stay a union there;
* Spark reads a union of plain sources in one scan: nothing is pushed into one.

``rewrite_streams`` rewrites the streams of a config together: a sub-plan several
streams share (computed once: the reference evaluator's memo, a Spark view) is
rewritten alike in each and never taken apart by the rules around it.

The rewriter goes bottom-up and repeats until no rule applies (a fixpoint).  Every
node of a result keeps the Origin of the node it copies (a pushed σ copy: the σ's; a
merged window: the widest one's); a fused σ keeps the outer σ's.  Importing this
module loads neither lxml nor pyspark.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from roses_app.algebra.plan.operators import Node, Source, Stream, Window, WindowSpec
from roses_app.algebra.planner.rewrite_rules import (
    OMEGA0,
    RULES,
    WINDOW_READERS,
    Env,
    Namespaces,
    Rule,
    drop_duplicate_inputs,
    drop_identity_window,
    flatten_unions,
    fuse_selections,
    merge_windows_in_union,
    push_map_below_union,
    push_selection_below_union,
    unwrap_single_union,
)

__all__ = [
    "OMEGA0",
    "RULES",
    "Env",
    "Rule",
    "apply_rule",
    "drop_duplicate_inputs",
    "drop_identity_window",
    "flatten_unions",
    "fuse_selections",
    "kept_shared",
    "merge_windows_in_union",
    "push_map_below_union",
    "push_selection_below_union",
    "rewrite",
    "rewrite_streams",
    "summary",
    "unwrap_single_union",
    "window_kind",
]

MAX_STEPS = 10_000


# -- the rewriter ------------------------------------------------------------------------


def window_kind(node: Node) -> WindowSpec | None:
    """The window a join, semijoin, diff, α or γ reads this input through (None: ω0,
    the events themselves).  A rewrite there must keep it."""
    if isinstance(node, Window) and node.spec != OMEGA0:
        return node.spec
    return None


def apply_rule(rule: Rule, node: Node, env: Env, *, read_as_window: bool = False) -> Node | None:
    """``rule`` at ``node``, or None when it does not apply there.  ``read_as_window``:
    the node is an input of a WINDOW_READERS operator."""
    after = rule(node, env)
    if after is None or after == node:
        return None
    if read_as_window and window_kind(after) != window_kind(node):
        return None
    return after


@dataclass
class _Run:
    """One rewriting: the rules, what they may consult, the names of those applied, the
    ``frozen`` sub-plans (shared with other streams, rewritten): left as they are, and
    no rule may take one apart; and the ``kept`` ones, the same as written.

    ``done`` keeps the result of every node object rewritten (with how it is read), so
    a sub-plan reached by many paths is rewritten once and stays one object: the
    result is a DAG like its input (the key holds the node, so its id is not reused).
    """

    rules: Sequence[Rule]
    env: Env
    applied: list[str] = field(default_factory=list)
    frozen: frozenset[Node] = frozenset()
    kept: frozenset[Node] = frozenset()  # shared sub-plans as written: read as windows
    done: dict[tuple[int, bool], tuple[Node, Node]] = field(default_factory=dict)

    def first_rule(self, node: Node, read_as_window: bool) -> Node | None:
        for rule in self.rules:
            after = apply_rule(rule, node, self.env, read_as_window=read_as_window)
            if after is not None and self.keeps_frozen(node, after):
                self.applied.append(rule.__name__)
                return after
        return None

    def keeps_frozen(self, before: Node, after: Node) -> bool:
        if not self.frozen:
            return True
        kept = set(after.walk())
        return all(node in kept for node in before.outermost(self.frozen))

    def children(self, node: Node) -> Node:
        reads = isinstance(node, WINDOW_READERS)

        def step(child: Node) -> Node:
            new = self.fixpoint(child, reads)
            return child if new == child else new  # an equal plan keeps its origins

        return node.map_inputs(step)

    def fixpoint(self, node: Node, read_as_window: bool) -> Node:
        """Children first, then the first rule that applies here, until none does."""
        found = self.done.get((id(node), read_as_window))
        if found is None:
            found = (node, self._fixpoint(node, read_as_window))
            self.done[(id(node), read_as_window)] = found
            # a result is its own fixpoint: met again (a rule rebuilt its parent), it stays
            self.done.setdefault((id(found[1]), read_as_window), (found[1], found[1]))
        return found[1]

    def _fixpoint(self, node: Node, read_as_window: bool) -> Node:
        read_as_window = read_as_window or node in self.kept
        for _ in range(MAX_STEPS):
            if node in self.frozen:
                return node
            node = self.children(node)
            after = self.first_rule(node, read_as_window)
            if after is None:
                return node
            node = after
        raise RuntimeError(f"the rewriter found no fixpoint in {MAX_STEPS} steps ({node.origin})")


def rewrite(
    plan: Node,
    namespaces: Namespaces = (),
    *,
    rules: Sequence[Rule] = RULES,
    costed: bool = True,
    applied: list[str] | None = None,
) -> Node:
    """An equivalent plan, rewritten until none of ``rules`` applies (one plan alone:
    for the streams of a config, ``rewrite_streams`` keeps what they share).

    ``namespaces`` (feeds.yaml's) only help decide which XPath engine a predicate runs
    on; ``costed=False`` applies the rules even where they save nothing (tests);
    ``applied``, if given, receives the name of every rule applied, in order."""
    run = _Run(rules, Env(namespaces, costed), applied if applied is not None else [])
    return run.fixpoint(plan, False)


# -- several streams ---------------------------------------------------------------------


def _in_several(plans: Sequence[Node]) -> set[Node]:
    """The sub-plans (sources aside) found in two plans or more, short of those found
    only inside a larger such one: below a node met before, nothing is walked again
    (what :func:`kept_shared` keeps is the same; 100,000 plans: 2.1 s to 0.9 s)."""
    first: dict[Node, int] = {}  # node -> the first plan it was met in
    several: set[Node] = set()
    for index, plan in enumerate(plans):
        todo, here = [plan], set()
        while todo:
            node = todo.pop()
            if id(node) in here:
                continue
            here.add(id(node))
            if first.setdefault(node, index) != index:
                several.add(node)  # met in an earlier plan, and so is all below it
            else:
                todo.extend(node.children())
    return {node for node in several if not isinstance(node, Source)}


def kept_shared(plans: Sequence[Node]) -> list[Node]:
    """The sub-plans several streams compute once (the reference evaluator's memo, and
    Spark's views for stateless ones) that a rewrite must keep whole: those found in
    two plans or more, outside any larger such sub-plan in at least one of them.
    Smallest first.  (One found only inside a larger shared one may be rewritten with
    it: every stream gets the same rewrite.)"""
    shared = _in_several(plans)
    found = {node for plan in plans for node in plan.outermost(shared)}
    # a sub-plan is smaller than any plan holding it, as a tree too
    return sorted(found, key=lambda node: node.tree_size)


def _substitute(node: Node, done: dict[Node, Node], memo: dict[int, Node] | None = None) -> Node:
    """``node`` with its sub-plans found in ``done`` replaced (each node object once)."""
    memo = {} if memo is None else memo
    found = done.get(node) or memo.get(id(node))
    if found is None:
        found = node.map_inputs(lambda child: _substitute(child, done, memo))
        memo[id(node)] = found
    return found


def rewrite_streams(
    streams: Sequence[Stream],
    namespaces: Namespaces = (),
    *,
    applied: dict[str, list[str]] | None = None,
) -> list[Stream]:
    """Every stream rewritten, without breaking up what several of them share.

    A shared sub-plan (``kept_shared``) gets the same rewrite in every stream (the
    rules only see structure), done as if a join read it (its window shape is kept);
    around it, no rule may take that rewrite apart.  So fusing σ_p(σ_q(F)) never makes
    two streams evaluate q where one view or memo did.  Each stream keeps its own
    origins.  ``applied``: stream name → names of the rules applied."""
    env = Env(namespaces)
    kept = kept_shared([s.plan for s in streams])
    done: dict[Node, Node] = {}
    for node in kept:  # smallest first: the shared ones inside are done already
        run = _Run(RULES, env, frozen=frozenset(done.values()))
        done[node] = run.fixpoint(_substitute(node, done), True)
    out = []
    # made once: one per stream cost 100,000 streams sharing 14,000 plans an hour
    frozen, kept_set = frozenset(done.values()), frozenset(kept)
    for stream in streams:
        run = _Run(RULES, env, frozen=frozen, kept=kept_set)
        out.append(replace(stream, plan=run.fixpoint(stream.plan, False)))
        if applied is not None:
            applied[stream.name] = run.applied
    return out


def summary(applied: Sequence[str]) -> str:
    """``fuse_selections ×2, flatten_unions`` (or ``none``) for explain."""
    counts = Counter(applied)
    return ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in counts.items()) or "none"
