"""Checkpoints and snapshots from :class:`tshard.Client`: save (synchronous, or in the
background with ``wait=False``), wait_saves, snapshot and load. ``tshard.checkpoint`` reads the
directories offline.
"""
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from . import attr_rules as _rules
from . import tshard_pb2 as pb
from ._common import AttrLike, _attr_msg, _dir, _flag, _names, _selection
from ._status import CHECKPOINT_IO, RANK_LOST
from .attr import Attr
from .errors import TshardError, error_for
from .future import Future, WaitTimeoutError


class Checkpoints:
    """Save, load, snapshot and wait for background saves (a mixin of :class:`tshard.Client`)."""

    def save(self, dir: str, names: Union[None, str, Iterable[str]] = None,
             keep_partial: bool = False, per_node: bool = False, key: Optional[str] = None,
             wait: bool = True, prefix: Optional[str] = None, all: bool = False,
             overwrite: bool = False) -> Union[Dict[str, Any], Future]:
        """Saves tensors into a checkpoint directory that every daemon can reach.

        What to save is asked one way: ``names`` (exact names, or globs such as
        ``"layers.*.weight"``), ``prefix``, or ``all=True``; none of them is refused. A
        directory that already holds a checkpoint is refused unless ``overwrite=True``, and the
        replacement is atomic: the previous checkpoint stays until every rank agreed on the new
        one (a failed save leaves it as it was). What saves into ``dir`` cut short left beside
        it (``.NAME.tmp-*``) is removed first.
        ``wait=False`` is an asynchronous save: a Future, done once every daemon took its copy
        of the tensors (the checkpoint holds their values at this point of the operations'
        order; later operations do not change it); its result says ``writing: True`` while the
        daemons write the files in the background, and :meth:`wait_saves` waits for them.

        Args:
            dir: the directory.
            names: a name, a glob, or an iterable of them.
            keep_partial: save partial placements as they are instead of reduced.
            per_node: each node writes its own directory (no shared file system).
            key: an idempotency key.
            wait: False: an asynchronous save (a Future, see above).
            prefix: save the tensors whose name starts with it.
            all: True saves every tensor of the job.
            overwrite: True replaces a checkpoint already in ``dir``.

        Returns:
            ``{'dir', 'tensors', 'bytes', 'files', 'seconds', 'writing', 'save_id'}``.

        Raises:
            InvalidArgumentError: no names, prefix or all, or more than one of them.
            ExistsError: ``dir`` holds a checkpoint and overwrite is False.
            CheckpointIoError: the directory cannot be written, or a rank was lost during the
            save (the message names the path). NotFoundError: a name, or a glob or prefix
            that matches nothing. LimitError: the copy of an asynchronous save does not fit
            the memory limit.

        Example::

            c.save("/shared/ckpt/step100", all=True)
            c.save("/shared/ckpt/layers", "layers.*.weight", overwrite=True)
            c.save("/shared/ckpt/step200", all=True, wait=False).result(); c.wait_saves()
        """
        names = _names(names, "save: names")
        prefix = _selection("save", names, prefix, all)
        path = _dir(dir)
        try:
            return self._op(key, self._note_save, wait, f"save to '{dir}'",
                            save=pb.SaveRequest(dir=path, names=names, prefix=prefix,
                                                all=_flag(all, "all"),
                                                overwrite=_flag(overwrite, "overwrite"),
                                                keep_partial=_flag(keep_partial, "keep_partial"),
                                                per_node=_flag(per_node, "per_node"),
                                                background=not _flag(wait, "wait")))
        except TshardError as e:  # a lost rank: the save's own error names its path
            if e.status != RANK_LOST:
                raise
            raise error_for(CHECKPOINT_IO, f"save to {path} was interrupted: "
                                           f"{e.message}; {path} holds a complete "
                                           "checkpoint or nothing: the one that was "
                                           "there before (or this save's, had it been "
                                           "exchanged before the loss), never a partial "
                                           "one") from None

    def _note_save(self, r: Any) -> Dict[str, Any]:
        """A save's result; one still writing is remembered for :meth:`wait_saves`."""
        res = _ckpt_result(r)
        if res["writing"]:
            if not hasattr(self, "_saves_started"):
                self._saves_started = set()
            self._saves_started.add(res["save_id"])
        return res

    def snapshot(self, key: Optional[str] = None) -> Dict[str, Any]:
        """Takes a snapshot now, on daemons started with ``--snapshot-dir``.

        An asynchronous save of every tensor into ``<snapshot dir>/<UTC timestamp>/``.

        Args:
            key: an idempotency key.

        Returns:
            As :meth:`save` with ``wait=False``: its ``'dir'`` names the snapshot and its
            ``'writing'`` is True while the files are written (:meth:`wait_saves` waits).

        Raises:
            InvalidArgumentError: the daemons have no snapshot directory. LimitError: the copy
            does not fit the memory limit.
        """
        return self._op(key, _ckpt_result, True, "snapshot",
                        save=pb.SaveRequest(snapshot=True, background=True))

    def wait_saves(self, timeout: Optional[float] = None,
                   save_id: Optional[int] = None) -> List[Dict[str, Any]]:
        """Waits until the background saves writing now (or the one numbered ``save_id``) are
        complete, polling :meth:`stats`.

        Args:
            timeout: seconds to wait at most (None: no limit).
            save_id: the save to wait for (its result's ``'save_id'``); None: every save writing
                now.

        Returns:
            Their records (``stats()['saves']`` entries: dir, state, bytes written of total).
            Without ``save_id`` they include this client's own asynchronous saves that ended
            since it started them (a failure is raised once).

        Raises:
            CheckpointIoError (or the failure's class): a save failed.
            tshard.WaitTimeoutError: still writing after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        started = getattr(self, "_saves_started", set())
        want = None if save_id is None else {save_id}
        delay = 0.002
        while True:
            saves = self.stats()["saves"]
            if want is None:  # writing now, and this client's own that may have ended already
                want = {s["save_id"] for s in saves if s["state"] == "writing"} | started
            mine = [s for s in saves if s["save_id"] in want]
            if all(s["state"] != "writing" for s in mine):
                started -= {s["save_id"] for s in mine}
                for s in mine:
                    if s["state"] == "failed":
                        raise error_for(s["status"], s["message"])
                return mine
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(f"background saves {sorted(want)} still writing after "
                                       f"{timeout} s")
            time.sleep(delay)  # polling the daemon's progress, bounded by the deadline
            delay = min(delay * 2, 0.05)

    def load(self, dir: str, names: Union[None, str, Iterable[str]] = None,
             attr: Union[None, AttrLike, Mapping[str, Any], Iterable[str]] = None,
             per_node: bool = False, key: Optional[str] = None, wait: bool = True,
             default: Optional[AttrLike] = None,
             in_place: bool = False) -> Union[Dict[str, Any], Future]:
        """Loads tensors of a checkpoint onto the daemons' ranks; a failure creates none.

        Args:
            dir: the checkpoint directory.
            names: a name or names (None: all of the checkpoint).
            attr: the attribute of every tensor (an Attr or its text), or attribute rules: a
                dict ``{name or glob: attribute}`` or ``"PATTERN=ATTR"`` texts (the grammar of
                :mod:`tshard.attr_rules`, ``tshard load --attr`` and ``tshardd --resume-attr``:
                a tensor takes the rule naming it, else the first glob matching its name, else
                ``default``). A rule naming a tensor the checkpoint lacks is refused.
            per_node: the checkpoint was saved per node.
            key: an idempotency key.
            wait: False returns a Future.
            default: the attribute of the tensors no rule names (None: each saved attribute).
            in_place: load into the stored tensors of the names (None: every tensor of the
                checkpoint) instead of new ones, each keeping its attribute and layout, as
                torch.distributed.checkpoint loads into existing tensors (a roll back to the
                checkpoint's step; no attr, no default). Each must have its saved dtype and
                shape, else nothing changes on any rank and the error names every mismatch.
                All or none: every tensor is loaded beside its stored slices first (room for a
                second copy), then all are replaced at once.

        Returns:
            ``{'dir', 'tensors', 'bytes', 'files', 'seconds'}``.

        Raises:
            CheckpointIoError, CorruptError: an unreadable or damaged checkpoint.
            ExistsError: a tensor of that name exists (without in_place).
            NotFoundError: in place, no stored tensor of that name.
            BadShapeError, BadDtypeError: in place, tensors not as saved (every one named).
            BadAttributeError: an attribute does not fit its tensor on these ranks.

        Example::

            c.load(ckdir, attr={"wte": "mesh=[3] placements=[S(0)]",
                                "h.*.w": "mesh=[3] placements=[S(1)]"},
                   default="mesh=[3] placements=[R]")
        """
        req = pb.LoadRequest(dir=_dir(dir), names=_names(names, "load: names"),
                             per_node=_flag(per_node, "per_node"),
                             in_place=_flag(in_place, "in_place"))
        if in_place and (attr is not None or default is not None):
            raise TypeError("load: in_place=True keeps each tensor's attribute; give no attr "
                            "and no default")
        if isinstance(attr, (str, Attr)):
            if default is not None:
                raise TypeError("load: give one attribute for every tensor as attr or as "
                                "default, not both; or attr as rules {name or glob: attr}")
            attr, default = None, attr
        req.rules.extend(_rules.messages(_rules.parse(attr, "load: attr")))
        if default is not None:
            req.attr.CopyFrom(_attr_msg(default))
        return self._op(key, _ckpt_result, wait, f"load from '{dir}'", load=req)


def _ckpt_result(r):
    """What a save or load did (CkptResult)."""
    k = r.ckpt
    return {"dir": k.dir, "tensors": k.tensors, "bytes": k.bytes, "files": k.files,
            "seconds": k.seconds, "writing": k.writing, "save_id": k.save_id}
