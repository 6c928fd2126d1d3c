package etcdkv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/oncekv/oncekv/kv"
)

// tx is one attempt of a transaction: reads at one revision (the first
// read's), writes buffered, everything read remembered for the commit's
// compares.
type tx struct {
	b        *Backend
	ctx      context.Context
	writable bool
	rev      int64 // the read revision; 0 until the first read
	err      error // the first failed read: the attempt is void

	reads   map[string]read   // key → what was seen (compared at commit)
	cache   map[string][]byte // key → value seen by a cursor (its range is compared)
	writes  map[string]*write // key → the buffered write
	ordered []string          // written keys, sorted
	spans   []span            // key ranges a cursor saw entirely
	scanned map[string][]byte // buckets scanned: their delete generation is compared
	deleted map[string][]byte // buckets deleted in: their delete generation is bumped

	created  []string // buckets this transaction creates
	onCommit []func()

	guess   bool     // a prefetch may guess instead of reading (guess.go)
	guessed []string // keys whose reads are guesses, in the order guessed
	stale   bool     // a refused commit found a guess stale (remember)
}

type read struct {
	val    []byte
	modRev int64 // 0: absent
}

type write struct {
	val []byte
	del bool
}

type span struct{ lo, hi string }

func (b *Backend) begin(ctx context.Context, writable bool) *tx {
	return &tx{b: b, ctx: ctx, writable: writable, reads: map[string]read{}, cache: map[string][]byte{}, writes: map[string]*write{},
		scanned: map[string][]byte{}, deleted: map[string][]byte{}}
}

var errReadOnly = fmt.Errorf("etcdkv: write in a read-only transaction: %w", kv.ErrTxNotWritable)

// call runs one request with the backend's timeout.
func (t *tx) call(fn func(ctx context.Context) error) error {
	ctx, cancel := t.b.request(t.ctx)
	defer cancel()
	return fn(ctx)
}

func (t *tx) fail(err error) {
	if t.err == nil {
		t.err = fmt.Errorf("etcdkv: read: %w", err)
	}
}

// revOpts reads at the transaction's revision once it has one.
func (t *tx) revOpts(opts ...clientv3.OpOption) []clientv3.OpOption {
	if t.rev != 0 {
		opts = append(opts, clientv3.WithRev(t.rev))
	}
	return opts
}

func (t *tx) setRev(h int64) {
	if t.rev == 0 {
		t.rev = h
	}
}

// get returns the value of key as this transaction sees it.
func (t *tx) get(key string) []byte {
	if w, ok := t.writes[key]; ok {
		if w.del {
			return nil
		}
		return w.val
	}
	if r, ok := t.reads[key]; ok {
		return r.val
	}
	if v, ok := t.cache[key]; ok {
		return v
	}
	if t.err != nil {
		return nil
	}
	var resp *clientv3.GetResponse
	if err := t.call(func(ctx context.Context) (err error) {
		resp, err = t.b.c.Get(ctx, key, t.revOpts()...)
		return err
	}); err != nil {
		t.fail(err)
		return nil
	}
	t.setRev(resp.Header.Revision)
	r := read{}
	if len(resp.Kvs) == 1 {
		r.val, r.modRev = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
		if r.val == nil {
			r.val = []byte{}
		}
	}
	t.reads[key] = r
	return r.val
}

// Prefetch reads the values of keys (kv.BucketKey) in one request, a
// read-only etcd Txn, at the transaction's revision (which the first read
// fixes), so that the Gets of them that follow send nothing; with them,
// the markers of their buckets not known to exist, which opening a bucket
// reads. Keys this transaction has read or written already are left out.
// A key prefetched is compared at the commit like any key read.
//
// An attempt that may guess (guess.go) takes a key's value from the memo,
// or a key marked Absent as absent, and reads only the rest: when every
// key is guessed, the prefetch sends nothing.
func (t *tx) Prefetch(keys []kv.BucketKey) {
	if t.err != nil {
		return
	}
	names := make([]string, 0, 2*len(keys))
	ops := make([]clientv3.Op, 0, 2*len(keys))
	add := func(k string, absent bool) {
		if _, ok := t.writes[k]; ok {
			return
		}
		if _, ok := t.reads[k]; ok {
			return
		}
		if _, ok := t.cache[k]; ok || slices.Contains(names, k) {
			return
		}
		if t.guess {
			if r, ok := t.b.memo.get(k); ok {
				t.reads[k] = r
				t.guessed = append(t.guessed, k)
				return
			}
			if absent {
				t.reads[k] = read{}
				t.guessed = append(t.guessed, k)
				return
			}
		}
		names = append(names, k)
		ops = append(ops, clientv3.OpGet(k, t.revOpts()...))
	}
	for _, bk := range keys {
		if _, ok := t.b.buckets.Load(string(bk.Bucket)); !ok {
			add(t.b.keys.bucketMarker(bk.Bucket), false) // a bucket is made once, and then read
		}
		add(t.b.keys.data(bk.Bucket, bk.Key), bk.Absent)
	}
	if len(ops) == 0 {
		return
	}
	var resp *clientv3.TxnResponse
	if err := t.call(func(ctx context.Context) (err error) {
		resp, err = t.b.c.Txn(ctx).Then(ops...).Commit()
		return err
	}); err != nil {
		t.fail(err)
		return
	}
	if len(resp.Responses) != len(names) {
		t.fail(fmt.Errorf("etcdkv: a prefetch of %d keys got %d answers", len(names), len(resp.Responses)))
		return
	}
	t.setRev(resp.Header.Revision)
	for i, k := range names {
		r := rangeRead(resp.Responses[i])
		t.reads[k] = r
		if !t.b.opts.NoGuessing {
			t.b.memo.set(k, r, resp.Header.Revision)
		}
	}
}

// rangeRead is what the Get answered by resp read: the value and its mod
// revision, or absent.
func rangeRead(resp *etcdserverpb.ResponseOp) read {
	r := read{}
	if rr := resp.GetResponseRange(); rr != nil && len(rr.Kvs) == 1 {
		r.val, r.modRev = rr.Kvs[0].Value, rr.Kvs[0].ModRevision
		if r.val == nil {
			r.val = []byte{}
		}
	}
	return r
}

func (t *tx) put(key string, val []byte) error {
	if !t.writable {
		return errReadOnly
	}
	t.record(key, &write{val: append([]byte{}, val...)})
	return nil
}

func (t *tx) del(key string) error {
	if !t.writable {
		return errReadOnly
	}
	t.record(key, &write{del: true})
	return nil
}

func (t *tx) record(key string, w *write) {
	if _, ok := t.writes[key]; !ok {
		i, _ := slices.BinarySearch(t.ordered, key)
		t.ordered = slices.Insert(t.ordered, i, key)
	}
	t.writes[key] = w
}

// The kv.Tx methods.

var _ kv.Tx = (*tx)(nil)

func (t *tx) Bucket(name []byte) kv.Bucket {
	if !t.exists(name) {
		return nil
	}
	return &bucket{t: t, name: append([]byte(nil), name...), prefix: t.b.keys.dataPrefix(name)}
}

// exists reports whether bucket name exists for this transaction: known
// to the backend already, or its marker read (and compared at commit).
func (t *tx) exists(name []byte) bool {
	if _, ok := t.b.buckets.Load(string(name)); ok {
		return true
	}
	marker := t.b.keys.bucketMarker(name)
	if t.get(marker) == nil {
		return false
	}
	if r, ok := t.reads[marker]; ok && r.modRev != 0 { // committed, not this transaction's own write
		t.b.buckets.Store(string(name), true)
	}
	return true
}

func (t *tx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	if len(name) == 0 {
		return nil, kv.ErrBucketNameRequired
	}
	if !t.writable {
		// Refused even for a bucket that exists, as bbolt refuses it:
		// code written against one backend behaves the same on the other
		// (found by FuzzEtcdAgreesWithBbolt).
		return nil, errReadOnly
	}
	if !t.exists(name) {
		if err := t.put(t.b.keys.bucketMarker(name), nil); err != nil {
			return nil, err
		}
		t.created = append(t.created, string(name))
	}
	return &bucket{t: t, name: append([]byte(nil), name...), prefix: t.b.keys.dataPrefix(name)}, nil
}

func (t *tx) Cursor() kv.Cursor {
	lo, hi := t.b.keys.bucketsRange()
	return &cursor{t: t, lo: lo, hi: hi, prefix: lo, names: true}
}

func (t *tx) Writable() bool     { return t.writable }
func (t *tx) OnCommit(fn func()) { t.onCommit = append(t.onCommit, fn) }

type bucket struct {
	t      *tx
	name   []byte
	prefix string
}

var (
	_ kv.Bucket = (*bucket)(nil)
	_ kv.Ranger = (*bucket)(nil)
)

func (b *bucket) Get(key []byte) []byte { return b.t.get(b.prefix + string(key)) }

func (b *bucket) Put(key, value []byte) error {
	switch {
	case !b.t.writable:
		return errReadOnly // first, as bbolt does
	case len(key) == 0:
		return kv.ErrKeyRequired
	case len(key) > kv.MaxKeySize:
		return kv.ErrKeyTooLarge
	}
	return b.t.put(b.prefix+string(key), value)
}

func (b *bucket) Delete(key []byte) error {
	if err := b.t.del(b.prefix + string(key)); err != nil {
		return err
	}
	b.t.deleted[string(b.name)] = b.name
	return nil
}

func (b *bucket) Cursor() kv.Cursor { return b.RangeCursor(nil, nil) }

// RangeCursor is kv.RangeCursor's bounded cursor (kv.Ranger): its pages
// are fetched from [lo, hi) alone, and only that range is compared at the
// commit, so that a write just past it does not refuse the transaction.
func (b *bucket) RangeCursor(lo, hi []byte) kv.Cursor {
	l, h := b.prefix+string(lo), prefixEnd(b.prefix)
	if hi != nil {
		h = min(h, b.prefix+string(hi))
	}
	h = max(h, l) // an empty range: nothing to read, nothing compared
	return &cursor{t: b.t, lo: l, hi: h, prefix: b.prefix, bucket: b.name}
}

func (b *bucket) NextSequence() (uint64, error) {
	k := b.t.b.keys.seq(b.name)
	var n uint64
	if v := b.t.get(k); v != nil {
		var err error
		if n, err = strconv.ParseUint(string(v), 10, 64); err != nil {
			return 0, fmt.Errorf("etcdkv: sequence of %q: %w", b.name, err)
		}
	}
	n++
	return n, b.t.put(k, []byte(strconv.FormatUint(n, 10)))
}

// Wrote reports whether the transaction wrote anything: one that did not
// sends no commit (kv's observer then counts none).
func (t *tx) Wrote() bool { return len(t.writes) > 0 }

// commit sends the writes as one etcd Txn, guarded by compares: every key
// read still has the revision it was read at (or is still absent), no key
// in a range a cursor saw changed after the read revision, and no bucket
// scanned had a delete since. It reports false for a conflict.
func (t *tx) commit() (bool, error) {
	if len(t.writes) == 0 {
		return true, nil
	}
	b := t.b
	cmps := t.compares(false)
	if len(cmps)+1 > b.opts.MaxTxOps {
		cmps = t.compares(true) // per bucket, coarser: more conflicts, but it fits
	}
	id := newID()
	marker := b.keys.marker(id)
	cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(marker), "=", 0))

	lease, err := b.markerLease(t.ctx)
	if err != nil {
		return false, err
	}
	ops := make([]clientv3.Op, 0, len(t.writes)+len(t.deleted)+1)
	size := 0
	for _, k := range t.ordered {
		w := t.writes[k]
		size += len(k) + len(w.val) + 16
		if w.del {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.val)))
		}
	}
	for _, name := range t.deleted {
		ops = append(ops, clientv3.OpPut(b.keys.delgen(name), id))
	}
	ops = append(ops, clientv3.OpPut(marker, "committed", clientv3.WithLease(lease)))
	for i := range cmps {
		pc := cmps[i].GetCompare()
		size += len(pc.Key) + len(pc.RangeEnd) + 16
	}
	if len(ops) > b.opts.MaxTxOps || len(cmps) > b.opts.MaxTxOps || size > b.opts.MaxRequestBytes {
		return false, &TxTooLargeError{Writes: len(ops), Compares: len(cmps), Bytes: size, MaxOps: b.opts.MaxTxOps, MaxBytes: b.opts.MaxRequestBytes}
	}

	// A conflict answers what the guesses should have been, for the next
	// attempt's (guess.go).
	var reread []clientv3.Op
	if len(t.guessed) <= b.opts.MaxTxOps {
		reread = make([]clientv3.Op, len(t.guessed))
		for i, k := range t.guessed {
			reread[i] = clientv3.OpGet(k)
		}
	}

	var resp *clientv3.TxnResponse
	err = t.call(func(ctx context.Context) (err error) {
		resp, err = b.c.Txn(ctx).If(cmps...).Then(ops...).Else(reread...).Commit()
		return err
	})
	if err == nil && loseAnswer != nil && loseAnswer() {
		err = errAnswerLost // a test's fault: the answer is dropped, the commit settled by its marker
	}
	if err == nil {
		t.remember(resp, reread)
		return resp.Succeeded, nil
	}
	if rejected(err) {
		return false, fmt.Errorf("etcdkv: commit refused: %w", err)
	}
	// Sent, and no answer: settle it before anyone retries.
	b.stats.answersLost.Add(1)
	return b.resolve(t.ctx, marker, err)
}

// remember keeps in the memo what a commit's answer tells: the values it
// wrote, at its revision, or the current values of the keys guessed,
// which a conflict read back in reread. A refused commit whose guess was
// wrong sets t.stale, unless the memo knew the key's current revision
// already: then a commit of this process changed it after the guess,
// which a transaction that read would have met as well (contention, not
// a stale memo).
func (t *tx) remember(resp *clientv3.TxnResponse, reread []clientv3.Op) {
	if t.b.opts.NoGuessing {
		return
	}
	at := resp.Header.Revision
	if !resp.Succeeded {
		if len(resp.Responses) != len(reread) {
			t.stale = len(t.guessed) > 0 // nothing read back: the next guesses would be the same
			return
		}
		for i, k := range t.guessed {
			fresh := rangeRead(resp.Responses[i])
			if fresh.modRev != t.reads[k].modRev {
				if known, ok := t.b.memo.get(k); !ok || known.modRev != fresh.modRev {
					t.stale = true
				}
			}
			t.b.memo.set(k, fresh, at)
		}
		return
	}
	for _, k := range t.ordered {
		r := read{}
		if w := t.writes[k]; !w.del {
			r = read{val: w.val, modRev: at}
			if r.val == nil {
				r.val = []byte{}
			}
		}
		t.b.memo.set(k, r, at)
	}
}

// compares builds the commit's guards; coarse replaces the compares of the
// values read in each bucket by one compare of the whole bucket.
func (t *tx) compares(coarse bool) []clientv3.Cmp {
	b := t.b
	var cmps []clientv3.Cmp
	spans := slices.Clone(t.spans)
	coarsened := map[string]bool{}
	keys := make([]string, 0, len(t.reads))
	for k := range t.reads {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dataRoot := b.keys.prefix + "k"
	for _, k := range keys {
		if coarse && strings.HasPrefix(k, dataRoot) {
			if bname, prefix, ok := b.keys.splitData(k); ok {
				if !coarsened[prefix] {
					coarsened[prefix] = true
					spans = append(spans, span{prefix, prefixEnd(prefix)})
					t.scanned[string(bname)] = bname
				}
				continue
			}
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", t.reads[k].modRev))
	}
	for _, s := range mergeSpans(spans) {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.lo), "<", t.rev+1).WithRange(s.hi))
	}
	names := make([]string, 0, len(t.scanned))
	for n := range t.scanned {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(b.keys.delgen([]byte(n))), "<", t.rev+1))
	}
	return cmps
}

// splitData returns the bucket and data prefix of a value's key.
func (k keys) splitData(key string) ([]byte, string, bool) {
	rest := key[len(k.prefix)+1:]
	n, w := binary.Uvarint([]byte(rest))
	if w <= 0 || n > uint64(len(rest)-w) {
		return nil, "", false
	}
	name := []byte(rest[w : w+int(n)])
	return name, key[:len(k.prefix)+1+w+int(n)], true
}

func mergeSpans(spans []span) []span {
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, b span) int { return strings.Compare(a.lo, b.lo) })
	out := []span{spans[0]}
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		if s.lo <= last.hi {
			if s.hi > last.hi {
				last.hi = s.hi
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// resolve settles a commit whose answer was lost. It writes the commit's
// marker as "aborted" unless the marker exists: if the fence lands, the
// original Txn (which requires the marker to be absent) can never apply;
// if the marker exists, its value says what happened.
func (b *Backend) resolve(ctx context.Context, marker string, cause error) (bool, error) {
	lease, _ := b.markerLease(ctx)
	var last error
	for attempt := 1; attempt <= 5 && !b.closed.Load(); attempt++ {
		var resp *clientv3.TxnResponse
		cctx, cancel := b.request(context.WithoutCancel(ctx))
		var put clientv3.Op
		if lease != 0 {
			put = clientv3.OpPut(marker, "aborted", clientv3.WithLease(lease))
		} else {
			put = clientv3.OpPut(marker, "aborted")
		}
		resp, last = b.c.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(marker), "=", 0)).Then(put).Else(clientv3.OpGet(marker)).Commit()
		cancel()
		if last == nil {
			if resp.Succeeded {
				return false, nil // fenced: it never applied, and never will
			}
			kvs := resp.Responses[0].GetResponseRange().GetKvs()
			return len(kvs) == 1 && string(kvs[0].Value) == "committed", nil
		}
		b.backoff(ctx, attempt+3)
	}
	if b.closed.Load() {
		last = errClosedUnsettled
	}
	b.stats.unknown.Add(1)
	return false, fmt.Errorf("%w: %w (and settling it: %w)", ErrCommitUnknown, cause, last)
}

// loseAnswer, set by a test (LoseAnswers), drops the answers of the
// commits it returns true for, as a network that loses them would: each
// such commit is settled by its marker (resolve), whether it applied or
// not.
var loseAnswer func() bool

// errAnswerLost is the error of a commit whose answer loseAnswer dropped.
var errAnswerLost = errors.New("etcdkv: the commit's answer was lost (a test's fault)")

// errClosedUnsettled is why a commit whose answer was lost stays unknown
// when Close comes before it is settled.
var errClosedUnsettled = errors.New("etcdkv: the backend was closed")

// rejected reports a commit error the server answered before applying
// anything (a request too large, too many operations).
func rejected(err error) bool {
	if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) {
		return true
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.OutOfRange:
			return true
		}
	}
	return false
}

// retryable reports failures worth another attempt: the read revision was
// compacted away, or etcd was briefly unreachable while nothing had been
// written.
func retryable(err error) bool {
	if errors.Is(err, ErrCommitUnknown) {
		return false // it may have applied: running the function again could apply it twice
	}
	if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrFutureRev) {
		return true
	}
	// The server's own transient errors ("leader changed", "no leader",
	// "request timed out"): the client retries a Get on them by itself,
	// but not a Txn, which is how the registry of prefixes reads.
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) && ee.Code() == codes.Unavailable {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
			return true
		}
	}
	return false
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + strconv.FormatInt(time.Now().UnixNano()&0xffff, 36)
}
