package recstore

import (
	"errors"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
)

// A Tally counts a log store's records, and their bytes, by group
// (Spec.Group: the ledger's tenants) in memory, where counters kept in the
// file would cost each transaction a page per group leaf it touches (with
// a thousand tenants, two pages more a one-request commit). The counts are
// made by the directory's rebuild, which reads every entry anyway, and
// kept exact after it by the writers (Add), under bbolt's writer lock.
//
// A transaction's changes are pending until it commits. bbolt runs OnCommit
// after it releases the writer lock, and a caller's own transaction (the
// Tx forms) may roll back without oncekv seeing it; so each transaction
// that adds to the tally stamps the file with its ID: the sequence of the
// log's tail bucket, a number in the bucket's header, which the record's
// append has changed already in almost every such transaction (tail.go),
// so that the stamp costs no bucket, no page and no Put of its own. (Earlier
// builds kept a 12-byte value in a bucket Name+".tally" of its own, which
// cost a one-record commit some 1.5 µs; the first writable open removes
// that bucket.) The stamp the next transaction reads says whether the pending
// changes committed: its own ID, or an older transaction's (rolled back,
// or failed). A reader applies them the same way, when its snapshot holds
// their stamp. Nothing else sets the tail's sequence (the union of log
// and tail gives NextSequence to the log), and bbolt's Compact keeps it.
// A damaged stamp is a wrong number: the pending changes are dropped, and
// the check, which compares the counts with the records, reports the
// tenant whose count that leaves wrong.
//
// The counts are the latest committed ones (and, in a write transaction,
// its own changes). A read transaction that began before the last change
// committed gets its snapshot's counts from At, which takes the changes
// committed since back out, as long as the tally still keeps them (the
// last tallyRecent), and says so when it does not.
type Tally struct {
	spec Spec
	tail []byte // the stamp's bucket: spec's tail (tailNS)
	mu   sync.Mutex
	// counts are the committed counts, as of the transaction whose ID is
	// at (the stamp); groups with nothing are removed.
	counts map[string]*Count
	at     uint64
	// pending is the last write transaction's changes, until they are
	// known committed (applied) or not (dropped).
	pending *tallyTx
	// recent holds the last tallyRecent transactions applied, a ring
	// whose newest is at recent[(next+tallyRecent-1)%tallyRecent]: a read
	// that began up to that many changes back gets its snapshot's counts
	// by taking them back out (At), where it would count the records.
	recent  [tallyRecent]appliedTx
	next    int
	nRecent int
}

// tallyRecent is how many applied transactions a Tally keeps. The console
// and the check read the counts in a transaction that, under a steady
// group commit of some 400 commits a second, has seen a few commits go by
// before it asks; 64 reach back some 150 ms there.
const tallyRecent = 64

// appliedTx is a transaction's changes once applied: the stamp they took
// the counts from (prev) and to (id).
type appliedTx struct {
	prev, id uint64
	changes  []groupChange
}

// Count is what one group keeps: its records and their bytes (the
// records' values, as Scan gives them).
type Count struct{ Records, Bytes int64 }

type tallyTx struct {
	tx      *bolt.Tx
	id      uint64
	changes []groupChange
}

type groupChange struct {
	group string
	Count
}

func newTally(spec Spec) *Tally {
	return &Tally{spec: spec, tail: spec.tailNS().Bytes(), counts: map[string]*Count{}}
}

// count adds an entry of scope with a value of n bytes, during the rebuild
// (no other use of t yet).
func (t *Tally) count(scope []byte, n int) {
	g := t.spec.Group(scope)
	if g == nil {
		return
	}
	c := t.counts[string(g)]
	if c == nil {
		c = &Count{}
		t.counts[string(g)] = c
	}
	c.Records++
	c.Bytes += int64(n)
}

// stampIn returns the stamp tx sees (0: none).
func (t *Tally) stampIn(tx kv.Tx) uint64 {
	bt := kv.BoltTx(tx)
	if bt == nil {
		return 0
	}
	if b := bt.Bucket(t.tail); b != nil {
		return b.Sequence()
	}
	return 0
}

// settle decides the pending changes of a transaction other than bt, in a
// write transaction tx of bt (bbolt has one writer: that one has ended):
// applied if tx sees its stamp, dropped if not. t.mu is held.
func (t *Tally) settle(tx kv.Tx, bt *bolt.Tx) {
	p := t.pending
	if p == nil || p.tx == bt {
		return
	}
	t.pending = nil
	if t.stampIn(tx) == p.id {
		t.apply(p)
	}
}

// apply makes p's changes committed, and keeps them among the recent.
// t.mu is held.
func (t *Tally) apply(p *tallyTx) {
	t.recent[t.next] = appliedTx{prev: t.at, id: p.id, changes: p.changes}
	t.next = (t.next + 1) % tallyRecent
	t.nRecent = min(t.nRecent+1, tallyRecent)
	for _, ch := range p.changes {
		c := t.counts[ch.group]
		if c == nil {
			c = &Count{}
			t.counts[ch.group] = c
		}
		c.Records += ch.Records
		c.Bytes += ch.Bytes
		if *c == (Count{}) {
			delete(t.counts, ch.group)
		}
	}
	t.at = p.id
}

// errTallyNeedsBolt is Add's error in a transaction bbolt does not back.
var errTallyNeedsBolt = errors.New("recstore: the tally counts bbolt transactions only")

// Add adds (records, bytes) to group's count in the write transaction tx,
// and stamps the file with tx's ID (once a transaction). The change counts
// once tx commits.
func (t *Tally) Add(tx kv.Tx, group string, records, bytes int64) error {
	if records == 0 && bytes == 0 {
		return nil
	}
	bt := kv.BoltTx(tx)
	if bt == nil {
		return errTallyNeedsBolt
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settle(tx, bt)
	p := t.pending
	if p == nil {
		p = &tallyTx{tx: bt, id: uint64(bt.ID())}
		tail := bt.Bucket(t.tail)
		if tail == nil { // a log whose entries all went to the log itself (large), or none yet
			var err error
			if tail, err = bt.CreateBucket(t.tail); err != nil {
				return err
			}
		}
		if err := tail.SetSequence(p.id); err != nil {
			return err
		}
		t.pending = p
		bt.OnCommit(func() { t.committed(p) })
	}
	for i := range p.changes {
		if ch := &p.changes[i]; ch.group == group {
			ch.Records += records
			ch.Bytes += bytes
			return nil
		}
	}
	p.changes = append(p.changes, groupChange{group, Count{records, bytes}})
	return nil
}

// committed applies p, unless a later transaction has already decided it.
func (t *Tally) committed(p *tallyTx) {
	t.mu.Lock()
	if t.pending == p {
		t.pending = nil
		t.apply(p)
	}
	t.mu.Unlock()
}

// view brings t up to what tx sees and calls fn with the counts under
// t.mu: in a write transaction, the committed counts and own, tx's own
// changes (exact); in a read transaction, the latest committed counts
// and, with walk, back, the changes committed since tx's snapshot (newest
// first), exact reporting whether taking those back out gives the
// snapshot's counts (false when tx began more than tallyRecent changes
// back).
func (t *Tally) view(tx kv.Tx, walk bool, fn func(counts map[string]*Count, own []groupChange, back []*appliedTx, exact bool)) {
	bt := kv.BoltTx(tx)
	var stamp uint64
	if !tx.Writable() {
		stamp = t.stampIn(tx)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tx.Writable() {
		t.settle(tx, bt)
		var own []groupChange
		if p := t.pending; p != nil && p.tx == bt {
			own = p.changes
		}
		fn(t.counts, own, nil, true)
		return
	}
	if p := t.pending; p != nil && p.id == stamp {
		// Committed: tx sees its stamp (only the transaction that wrote it
		// can be pending with its ID).
		t.pending = nil
		t.apply(p)
	}
	var back []*appliedTx
	exact := false
	if walk {
		back, exact = t.since(stamp)
	}
	fn(t.counts, nil, back, exact)
}

// since returns the applied changes that took the counts from stamp to
// t.at, newest first, or false when the recent ones do not reach back to
// stamp. t.mu is held.
func (t *Tally) since(stamp uint64) ([]*appliedTx, bool) {
	var back []*appliedTx
	at := t.at
	for i := 0; at != stamp; i++ {
		if i == t.nRecent {
			return nil, false
		}
		a := &t.recent[(t.next-1-i+2*tallyRecent)%tallyRecent]
		if a.id != at {
			return nil, false
		}
		back = append(back, a)
		at = a.prev
	}
	return back, true
}

// Get returns group's count: in a write transaction, with its own changes;
// in a read transaction, the latest committed (perhaps ahead of tx).
func (t *Tally) Get(tx kv.Tx, group string) Count {
	var out Count
	t.view(tx, false, func(counts map[string]*Count, own []groupChange, _ []*appliedTx, _ bool) {
		if c := counts[group]; c != nil {
			out = *c
		}
		for _, ch := range own {
			if ch.group == group {
				out.Records += ch.Records
				out.Bytes += ch.Bytes
			}
		}
	})
	return out
}

// At returns every group's count as tx sees it (groups with nothing left
// out), or false when t cannot tell: tx is a read transaction that began
// before more changes committed than t keeps (tallyRecent).
func (t *Tally) At(tx kv.Tx) (map[string]Count, bool) {
	var out map[string]Count
	var ok bool
	t.view(tx, true, func(counts map[string]*Count, own []groupChange, back []*appliedTx, exact bool) {
		if ok = exact; !ok {
			return
		}
		out = make(map[string]Count, len(counts))
		for g, c := range counts {
			out[g] = *c
		}
		add := func(changes []groupChange, sign int64) {
			for _, ch := range changes {
				c := out[ch.group]
				c.Records += sign * ch.Records
				c.Bytes += sign * ch.Bytes
				if out[ch.group] = c; c == (Count{}) {
					delete(out, ch.group)
				}
			}
		}
		add(own, 1)
		for _, a := range back {
			add(a.changes, -1)
		}
	})
	return out, ok
}

// groups returns how many groups have records (for Stats).
func (t *Tally) groups() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.counts)
}

// TallyOf returns the tally of spec's log store in the database behind tx,
// when this process has opened it and spec counts groups; nil otherwise.
func TallyOf(tx kv.Tx, spec Spec) *Tally {
	if s := logOf(tx, spec.Name); s != nil {
		return s.tally
	}
	return nil
}
