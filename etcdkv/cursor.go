package etcdkv

import (
	"context"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/oncekv/oncekv/kv"
)

// cursorPage is how many keys a cursor fetches at a time (a variable so
// that tests can make pages small enough for their data to cross them).
var cursorPage = 128

// cursor walks a bucket's keys [lo, hi) as the transaction sees them: the
// values at the read revision, merged with the transaction's own writes.
// Every range it fetches is remembered: the commit requires that no key in
// it changed after the read revision (and that the bucket had no delete).
type cursor struct {
	t      *tx
	lo, hi string // the keys walked: a bucket's, or a range of them (bucket.RangeCursor)
	prefix string // what keys begin with but callers do not see: the bucket's data prefix
	bucket []byte // nil for the list of buckets
	names  bool   // the list of buckets: keys are bucket names, values nil

	cur string // the current key, "" before the first step or past the end
	// window holds remote keys known to be all there is in [winLo, winHi).
	window       []entry
	winLo, winHi string
}

type entry struct {
	key       string
	val       []byte
	createRev int64
}

var _ kv.Cursor = (*cursor)(nil)

func (c *cursor) out(key string) ([]byte, []byte) {
	c.cur = key
	if key == "" {
		return nil, nil
	}
	k := []byte(key[len(c.prefix):])
	if c.names {
		return k, nil
	}
	if _, written := c.t.writes[key]; !written {
		if i, found := c.inWindow(key); found {
			return k, c.window[i].val
		}
	}
	return k, c.t.get(key)
}

// inWindow finds key in the page the cursor holds.
func (c *cursor) inWindow(key string) (int, bool) {
	return slices.BinarySearchFunc(c.window, key, func(e entry, k string) int { return cmpStr(e.key, k) })
}

// Revision returns the revision of the commit that created the current key
// (0 for a key this transaction wrote, or none): the relay orders an outbox
// written by several processes by it. A later update of the key (an
// attempt counted) does not move it.
func (c *cursor) Revision() int64 {
	if c.cur == "" {
		return 0
	}
	if _, ok := c.t.writes[c.cur]; ok {
		return 0
	}
	if i, found := c.inWindow(c.cur); found {
		return c.window[i].createRev
	}
	return 0
}

func (c *cursor) First() ([]byte, []byte) { return c.out(c.after(c.lo, true)) }
func (c *cursor) Last() ([]byte, []byte)  { return c.out(c.before(c.hi)) }
func (c *cursor) Seek(s []byte) ([]byte, []byte) {
	return c.out(c.after(c.prefix+string(s), true))
}

func (c *cursor) Next() ([]byte, []byte) {
	if c.cur == "" {
		return nil, nil
	}
	return c.out(c.after(c.cur, false))
}

func (c *cursor) Prev() ([]byte, []byte) {
	if c.cur == "" {
		return nil, nil
	}
	return c.out(c.before(c.cur))
}

// after returns the first key >= from (> from when !inclusive) in the
// merged view, or "".
func (c *cursor) after(from string, inclusive bool) string {
	start := from
	if !inclusive {
		start = from + "\x00"
	}
	if start < c.lo {
		start = c.lo
	}
	for {
		if start >= c.hi {
			return "" // nothing to fetch: a range read from the end or past it is empty, or inverted
		}
		remote := c.remoteAfter(start)
		local := c.localAfter(start)
		next := minKey(remote, local)
		if next == "" || next >= c.hi {
			return ""
		}
		if w, ok := c.t.writes[next]; ok && w.del {
			start = next + "\x00"
			continue
		}
		return next
	}
}

// before returns the last key < to in the merged view, or "".
func (c *cursor) before(to string) string {
	end := min(to, c.hi)
	for {
		if end <= c.lo {
			return ""
		}
		remote := c.remoteBefore(end)
		local := c.localBefore(end)
		prev := maxKey(remote, local)
		if prev == "" || prev < c.lo {
			return ""
		}
		if w, ok := c.t.writes[prev]; ok && w.del {
			end = prev
			continue
		}
		return prev
	}
}

func minKey(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return min(a, b)
}

func maxKey(a, b string) string { return max(a, b) }

// localAfter is the first written key >= start in [lo, hi), deleted or not.
func (c *cursor) localAfter(start string) string {
	ks := c.t.ordered
	i, _ := slices.BinarySearch(ks, start)
	if i < len(ks) && ks[i] < c.hi {
		return ks[i]
	}
	return ""
}

func (c *cursor) localBefore(end string) string {
	ks := c.t.ordered
	i, _ := slices.BinarySearch(ks, end)
	if i > 0 && ks[i-1] >= c.lo {
		return ks[i-1]
	}
	return ""
}

// remoteAfter is the first key >= start stored at the read revision.
func (c *cursor) remoteAfter(start string) string {
	if c.window != nil && start >= c.winLo && start < c.winHi {
		i, _ := slices.BinarySearchFunc(c.window, start, func(e entry, k string) int { return cmpStr(e.key, k) })
		if i < len(c.window) {
			return c.window[i].key
		}
		if c.winHi == c.hi {
			return ""
		}
		start = c.winHi
	}
	page := c.fetch(start, c.hi, false)
	if len(page) == cursorPage {
		c.setWindow(page, start, page[len(page)-1].key+"\x00")
	} else {
		c.setWindow(page, start, c.hi)
	}
	if len(page) == 0 {
		return ""
	}
	return page[0].key
}

// remoteBefore is the last key < end stored at the read revision.
func (c *cursor) remoteBefore(end string) string {
	if c.window != nil && end > c.winLo && end <= c.winHi {
		i, _ := slices.BinarySearchFunc(c.window, end, func(e entry, k string) int { return cmpStr(e.key, k) })
		if i > 0 {
			return c.window[i-1].key
		}
		if c.winLo == c.lo {
			return ""
		}
		end = c.winLo
	}
	page := c.fetch(c.lo, end, true) // descending
	slices.Reverse(page)
	if len(page) == cursorPage {
		c.setWindow(page, page[0].key, end)
	} else {
		c.setWindow(page, c.lo, end)
	}
	if len(page) == 0 {
		return ""
	}
	return page[len(page)-1].key
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// setWindow keeps a page and, in a writable transaction, remembers its
// range as read (compared at commit) and its values (a later Get of one
// of its keys needs no compare of its own). A read-only transaction has
// no commit: it keeps the page alone, so that a scan of a large bucket
// (the relay's queue, a listing, a check) holds one page, not every value
// it passed.
func (c *cursor) setWindow(page []entry, lo, hi string) {
	c.window, c.winLo, c.winHi = page, lo, hi
	if c.window == nil {
		c.window = []entry{}
	}
	if !c.t.writable {
		return
	}
	c.t.spans = append(c.t.spans, span{lo, hi})
	if c.bucket != nil {
		c.t.scanned[string(c.bucket)] = c.bucket
	}
	for _, e := range page {
		if !c.names {
			c.t.cache[e.key] = e.val // covered by the span: no compare of its own
		}
	}
}

// fetch reads up to cursorPage keys of [lo, hi) at the read revision.
func (c *cursor) fetch(lo, hi string, descend bool) []entry {
	t := c.t
	if t.err != nil {
		return nil
	}
	order := clientv3.SortAscend
	if descend {
		order = clientv3.SortDescend
	}
	opts := t.revOpts(clientv3.WithRange(hi), clientv3.WithLimit(int64(cursorPage)), clientv3.WithSort(clientv3.SortByKey, order))
	if c.names {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	var resp *clientv3.GetResponse
	if err := t.call(func(ctx context.Context) (err error) {
		resp, err = t.b.c.Get(ctx, lo, opts...)
		return err
	}); err != nil {
		t.fail(err)
		return nil
	}
	t.setRev(resp.Header.Revision)
	out := make([]entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		v := kv.Value
		if v == nil {
			v = []byte{}
		}
		out = append(out, entry{key: string(kv.Key), val: v, createRev: kv.CreateRevision})
	}
	return out
}
