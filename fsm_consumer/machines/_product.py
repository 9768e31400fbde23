"""The machines of a composition explored together, under the links code makes between them.

A node of the product is every role's node (``_explore.Node``: state, running timers, pending timeouts); the
copies of a role (one machine per broker) are alike, so a role's copies are kept sorted: two nodes that differ
only by which copy is where are one (symmetry). Each machine moves as its own exploration lets it (every event
anywhere, timers and timeouts firing, conditions either way), one machine at a time (interleaving), except:

- a trigger that a link fires only while a condition holds (``only_when``) arrives only then (or while an
  ``unless`` condition of the environment holds: a guard of the move, which ``assuming`` can rule out);
- a move that causes a link (a state entered, a trigger fired) fires the link's trigger at once at every copy
  of the target where it has transitions, within the same move (as within one pass of the loop), and those
  moves may cause links in turn.

Properties, each reported with the shortest sequence of moves: no deadlock (the first role, the background
lifecycle, can always reach its end), the composition's invariants in every reachable node, and ``finishes``:
from every reachable node where ``from`` holds, a node where ``reaches`` holds stays reachable without the
moves ``avoiding`` names (close finishes on its own, not by its budget running out).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

import attrs

from ._composition import Composition, Link, LinkIndex, RolePredicate
from ._explore import Node, Step, _Moves, breadth_first

__all__ = ["ProductExploration", "explore_composition"]

Product = tuple[tuple[Node, ...], ...]
Said = tuple[str, tuple[str, str, str, str]]  # a linked move's words, and its (role, source, trigger, dest)
_MAX_CHAIN = 8  # links causing links: deeper is a loop in the composition


def _key(node: Node) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    return node.state, tuple(sorted(node.timers)), tuple(sorted(node.pending))


@attrs.frozen
class Move:
    """One move of the product: what moved (``said``), the (role, trigger) pairs fired in it and the environment
    conditions it took."""

    said: str
    fired: frozenset[tuple[str, str]]
    conditions: tuple[tuple[str, bool], ...]
    dest: Product
    steps: tuple[tuple[str, str, str, str], ...] = ()  # (role, source, trigger, dest) of each machine that moved


@attrs.frozen
class ProductViolation:
    prop: str
    name: str
    message: str
    path: tuple[Move, ...]
    line: int = 0

    def drawn(self, composition: Composition, initial: Product) -> dict[str, str]:
        """Each machine's diagram (DOT, by role) with its part of this counterexample in red, and where it ends."""
        from ._diagram import render_dot

        out = {}
        for i, role in enumerate(composition.roles):
            steps = [
                (src, dst, trig) for r, src, trig, dst in (st for m in self.path for st in m.steps) if r == role.name
            ]
            end = (self.path[-1].dest if self.path else initial)[i][0].state
            out[role.name] = render_dot(role.spec, steps, end=end)
        return out

    def trace(self, initial: Product, roles: list[str]) -> str:
        lines = [f"  {_show(initial, roles)}"]
        for move in self.path:
            lines.append(f"    {move.said}")
            lines.append(f"      => {_show(move.dest, roles)}")
        return "\n".join(lines)


@attrs.frozen
class ProductExploration:
    composition: Composition
    initial: Product
    nodes: int
    edges: int
    seconds: float
    violations: tuple[ProductViolation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        c = self.composition
        roles = ", ".join(f"{r.name}={r.spec.machine}" + (f" x{r.copies}" if r.copies > 1 else "") for r in c.roles)
        verdict = "every property holds" if self.ok else f"{len(self.violations)} violation(s)"
        return (
            f"composition {c.name} ({roles}): {self.nodes} nodes, {self.edges} edges, {self.seconds * 1000:.0f} ms; "
            f"{len(c.links)} link(s), no deadlock, {len(c.invariants)} invariant(s), {len(c.finishes)} finish(es): "
            f"{verdict}"
        )

    def report(self) -> str:
        out = [self.summary()]
        names = [r.name for r in self.composition.roles]
        for v in self.violations:
            where = f" ({self.composition.file}:{v.line})" if v.line else ""
            out.append(f"  {v.prop} {v.name}{where}: {v.message}")
            out.append(v.trace(self.initial, names))
        return "\n".join(out)


def _show(p: Product, roles: list[str]) -> str:
    return "; ".join(
        f"{name} " + (str(copies[0]) if len(copies) == 1 else "[" + " | ".join(map(str, copies)) + "]")
        for name, copies in zip(roles, p, strict=True)
    )


def explore_composition(composition: Composition) -> ProductExploration:
    started = time.perf_counter()
    walk = _Walk(composition)
    initial = walk.initial()
    parent, edges, path_to = breadth_first(initial, walk.moves)
    violations: list[ProductViolation] = []
    if walk.refused:
        at, link, role, state = walk.refused[0]  # breadth-first: the shortest
        violations.append(
            ProductViolation(
                "link", link.name,
                f"fires {link.trigger} at {role} in {state}, which neither takes nor ignores it (IllegalTransition)",
                path_to(at), link.line,
            )
        )  # fmt: skip
    end_role = composition.roles[0]
    ends = RolePredicate({end_role.name: frozenset(end_role.spec.terminal)})
    stuck = _unreachable_from(walk, parent, edges, ends, frozenset(), {})
    if stuck is not None:
        ends_in = sorted(ends.states[end_role.name])
        text = f"{end_role.name} cannot reach its end ({ends_in})"
        violations.append(ProductViolation("deadlock", end_role.name, text, path_to(stuck)))
    for inv in composition.invariants:
        bad = next((n for n in parent if walk.holds(inv.when, n) and not walk.holds(inv.then, n)), None)
        if bad is not None:
            text = f"when {inv.when}, then {inv.then} should hold" + (
                f" ({inv.description})" if inv.description else ""
            )
            violations.append(ProductViolation("invariant", inv.name, text, path_to(bad), inv.line))
    for fin in composition.finishes:
        starts = {n for n in parent if walk.holds(fin.start, n)}
        stuck = _unreachable_from(walk, parent, edges, fin.reaches, fin.avoiding, fin.assuming, starts)
        if stuck is not None:
            avoiding = ", ".join(sorted(f"{r}.{t}" for r, t in fin.avoiding)) or "nothing"
            text = f"from here {fin.reaches} cannot be reached avoiding {avoiding}" + (
                f" ({fin.description})" if fin.description else ""
            )
            violations.append(ProductViolation("finish", fin.name, text, path_to(stuck), fin.line))
    return ProductExploration(
        composition, initial, len(parent), len(edges), time.perf_counter() - started, tuple(violations)
    )


def _unreachable_from(walk, parent, edges, target: RolePredicate, avoiding, assuming, starts=None):
    """The first node (breadth-first) of ``starts`` (default: all) from which no node where ``target`` holds can be
    reached over edges that fire nothing of ``avoiding`` and take no condition against ``assuming``."""
    good = {n for n in parent if walk.holds(target, n)}
    back: dict[Product, list[Product]] = {}
    for src, move in edges:
        if move.fired & avoiding or any(assuming.get(c, v) != v for c, v in move.conditions):
            continue
        back.setdefault(move.dest, []).append(src)
    todo = deque(good)
    while todo:
        n = todo.popleft()
        for src in back.get(n, ()):
            if src not in good:
                good.add(src)
                todo.append(src)
    for n in parent:  # breadth-first order: the shortest counterexample
        if (starts is None or n in starts) and n not in good:
            return n
    return None


class _Walk:
    def __init__(self, composition: Composition) -> None:
        self.c = composition
        self.roles = [r.name for r in composition.roles]
        self.index = {name: i for i, name in enumerate(self.roles)}
        self.moves_of = [_Moves(r.spec) for r in composition.roles]
        index = LinkIndex.of(composition)
        self.guarded, self.by_fired, self.by_enters, self.guards = (
            index.guarded, index.by_fired, index.by_enters, index.guards,
        )  # fmt: skip
        self._solo_cache: dict[tuple[int, Node], list[Step]] = {}
        self._link_cache: dict[tuple[int, Node, str], list[Step]] = {}
        self.refused: list[tuple[Product, Link, str, str]] = []  # a link fired a trigger its target refuses there
        self._at: Product = ()

    def initial(self) -> Product:
        out = []
        for r, moves in zip(self.c.roles, self.moves_of, strict=True):
            node = moves.enter(r.spec.initial, None, Node(r.spec.initial))
            out.append((node,) * r.copies)
        return tuple(out)

    def holds(self, pred: RolePredicate, p: Product) -> bool:
        return all(all(n.state in states for n in p[self.index[role]]) for role, states in pred.states.items())

    def moves(self, p: Product) -> Iterator[Move]:
        self._at = p
        for ri, role in enumerate(self.roles):
            copies = p[ri]
            for ci, node in enumerate(copies):
                if ci and copies[ci - 1] == node:
                    continue  # a copy alike the one before moves alike (symmetry)
                for step in self._solo(ri, node):
                    if not self._possible(role, step, p):
                        continue
                    conditions = self._admitted(role, step, p)
                    if conditions is None:
                        continue
                    yield from self._settle(p, ri, ci, node, step, conditions)
                # a trigger a fired-link follows is followed even where it changes nothing (ignored): code fires it
                for r2, trigger in self.by_fired:
                    if r2 == role and node.state in self.moves_of[ri].ignored.get(trigger, ()):
                        ignored = Step(trigger, "event, ignored", (), -1, node)
                        yield from self._settle(p, ri, ci, node, ignored, ())

    def _solo(self, ri: int, node: Node) -> list[Step]:
        """A machine's own moves from ``node`` depend on nothing else: made once per node."""
        key = (ri, node)
        got = self._solo_cache.get(key)
        if got is None:
            got = self._solo_cache[key] = list(self.moves_of[ri].moves(node, []))
        return got

    def _linked(self, ti: int, node: Node, link: Link) -> list[Step]:
        key = (ti, node, link.name)
        got = self._link_cache.get(key)
        if got is None:
            got = self._link_cache[key] = list(
                self.moves_of[ti]._fire(node, link.trigger, f"link {link.name}", node, [])
            )
        return got

    def _possible(self, role: str, step: Step, p: Product) -> bool:
        """Whether the conditions ``step`` was taken with agree with what the composition's guards fix in ``p``."""
        for guard in self.guards.get(role, ()):
            for name, value in step.guards:
                if name == guard.condition and value != guard.value and self.holds(guard.during, p):
                    return False
        return True

    def _admitted(self, role: str, step: Step, p: Product) -> tuple[tuple[str, bool], ...] | None:
        """The environment conditions under which ``step`` may happen (None: never): a trigger that code fires
        only while a link's condition holds arrives only then, or while an ``unless`` condition holds."""
        if not step.how.startswith("event"):
            return ()
        taken: list[tuple[str, bool]] = []
        for link in self.guarded.get((role, step.trigger), ()):
            if self.holds(RolePredicate(link.only_when), p):
                continue
            if not link.unless:
                return None
            taken += [(c, True) for c in link.unless]
        return tuple(taken)

    def _settle(self, p: Product, ri: int, ci: int, node: Node, step: Step, conditions) -> Iterator[Move]:
        first = self._replace(p, ri, ci, step.dest)
        said = f"{self.roles[ri]}{self._copy(ri, ci)}: {node.state} {step}"
        fired = frozenset({(self.roles[ri], step.trigger)})
        cause = (self.roles[ri], node.state, step.dest.state, step.trigger)
        for dest, more, extra in self._links(first, [cause], 0):
            text = said + "".join(f"; {m[0]}" for m in more)
            steps: tuple[tuple[str, str, str, str], ...] = (
                (self.roles[ri], node.state, step.trigger, step.dest.state),
                *(m[1] for m in more),
            )
            yield Move(text, fired | extra, conditions, self._canon(dest), steps)

    def _links(self, p: Product, causes, depth: int) -> Iterator[tuple[Product, list[Said], frozenset]]:
        """Every way the links of ``causes`` (role, source state, dest state, trigger) play out from ``p``."""
        links = []
        for role, source, dest, trigger in causes:
            links += self.by_fired.get((role, trigger), [])
            links += [k for k in self.by_enters.get(role, []) if dest in k.enters and source not in k.enters]
        if not links:
            yield p, [], frozenset()
            return
        if depth >= _MAX_CHAIN:
            raise RuntimeError(f"composition {self.c.name}: links cause links more than {_MAX_CHAIN} deep")
        yield from self._fire_all(p, links, 0, depth)

    def _fire_all(self, p: Product, links: list[Link], k: int, depth: int):
        if k == len(links):
            yield p, [], frozenset()
            return
        link = links[k]
        ti = self.index[link.target]
        for q, said, fired, causes in self._fire_copies(p, ti, link, 0):
            for r, more, extra in self._links(q, causes, depth + 1):
                for s, rest, extra2 in self._fire_all(r, links, k + 1, depth):
                    yield s, said + more + rest, fired | extra | extra2

    def _fire_copies(self, p: Product, ti: int, link: Link, start: int):
        """Fire ``link.trigger`` at each copy of role ``ti`` from ``start`` on where it has transitions."""
        copies = p[ti]
        moves = self.moves_of[ti]
        for ci in range(start, len(copies)):
            node = copies[ci]
            if not moves.by_trigger_source.get((link.trigger, node.state)):
                if node.state in moves.ignored.get(link.trigger, ()):
                    # fired all the same (code fires it whatever the state): no change, but it causes its links
                    ignored = Step(link.trigger, f"link {link.name}, ignored", (), -1, node)
                    said = (
                        f"{self.roles[ti]}{self._copy(ti, ci)}: {node.state} {ignored}",
                        (self.roles[ti], node.state, link.trigger, node.state),
                    )
                    cause = (self.roles[ti], node.state, node.state, link.trigger)
                    for r, more, fired, causes in self._fire_copies(p, ti, link, ci + 1):
                        yield r, [said, *more], fired | {(self.roles[ti], link.trigger)}, [cause, *causes]
                    return
                self.refused.append((self._at, link, self.roles[ti], node.state))
                continue
            for step in self._linked(ti, node, link):
                if not self._possible(self.roles[ti], step, p):
                    continue
                q = self._replace_at(p, ti, ci, step.dest)
                said = (
                    f"{self.roles[ti]}{self._copy(ti, ci)}: {node.state} {step}",
                    (self.roles[ti], node.state, link.trigger, step.dest.state),
                )
                cause = (self.roles[ti], node.state, step.dest.state, link.trigger)
                for r, more, fired, causes in self._fire_copies(q, ti, link, ci + 1):
                    yield r, [said, *more], fired | {(self.roles[ti], link.trigger)}, [cause, *causes]
            return
        yield p, [], frozenset(), []

    def _copy(self, ri: int, ci: int) -> str:
        return f"[{ci}]" if self.c.roles[ri].copies > 1 else ""

    @staticmethod
    def _replace_at(p: Product, ri: int, ci: int, node: Node) -> Product:
        """``p`` with copy ``ci`` of role ``ri`` replaced, copies kept in place (while links fire in order)."""
        copies = list(p[ri])
        copies[ci] = node
        return (*p[:ri], tuple(copies), *p[ri + 1 :])

    def _replace(self, p: Product, ri: int, ci: int, node: Node) -> Product:
        return self._canon(self._replace_at(p, ri, ci, node))

    def _canon(self, p: Product) -> Product:
        return tuple(tuple(sorted(copies, key=_key)) if len(copies) > 1 else copies for copies in p)
