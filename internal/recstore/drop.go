package recstore

import (
	"fmt"

	"github.com/oncekv/oncekv/kv"
)

// DropDamaged deletes the log entry at pos when it is damaged, as the
// check reports it ("log entry POS: damaged", or a record that does not
// decode): an operator's decision, since a damaged entry that still names
// its key answers that key with an error, so that its request never runs
// again, until it is dropped. The directory forgets it. It refuses an
// entry that is intact and decodes (kv.ErrNotDamaged), and a position
// without an entry (kv.ErrNoEntry), which every position is in the keyed
// layout (no log: etcd, or a kind this database never wrote).
func (k *Kind[R]) DropDamaged(tx kv.Tx, pos uint64) (kv.DroppedEntry, error) {
	if !k.usesLog(tx) {
		return kv.DroppedEntry{}, fmt.Errorf("%w: %s records are kept by key in this database, not in a log", kv.ErrNoEntry, k.KindName)
	}
	b := k.both(tx)
	v := b.Get(posKey(pos))
	if v == nil {
		return kv.DroppedEntry{}, fmt.Errorf("%w: %s log entry %x", kv.ErrNoEntry, k.KindName, pos)
	}
	d := kv.DroppedEntry{Kind: k.KindName, Entry: pos}
	scope, key, payload, ok := unwrap(v)
	switch {
	case !ok:
		d.Reason = "damaged framing"
	case !intact(v):
		d.Reason = "checksum mismatch"
	default:
		if _, err := k.Decode(string(scope), string(key), payload, true); err != nil {
			d.Reason = err.Error()
		}
	}
	if d.Reason == "" {
		return kv.DroppedEntry{}, fmt.Errorf("%w: %s record %q/%q (log entry %x)", kv.ErrNotDamaged, k.KindName, scope, key, pos)
	}
	if ok {
		d.Scope, d.Key = string(scope), string(key)
	}
	if err := b.Delete(posKey(pos)); err != nil {
		return kv.DroppedEntry{}, err
	}
	if s := logOf(tx, k.Spec.Name); s != nil && ok {
		s.retire(tx, s.dir.hashBytes(scope, key), pos)
	}
	return d, nil
}
