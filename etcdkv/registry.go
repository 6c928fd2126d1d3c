package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The registry of prefixes. A prefix that begins with another database's
// puts its keys inside that database's ranges, where they show as buckets
// nobody made (and the other way round). Nothing in the key layout can tell
// the two apart, so every backend records its prefix, outside every
// database, before its first write, and checks that no recorded prefix
// nests with its own before its first read:
//
//	registryRoot P      P is a database's prefix (its value: when it was recorded)
//	registryRoot        bumped by every recording, compared by the next
//
// The version key makes two recordings that race (say "/app/" and
// "/app/b/" opened at once) conflict, so the second sees the first.
// A backend that only reads checks and records nothing: a mistyped prefix
// given to a read-only tool leaves no trace.
const registryRoot = "\x00oncekv/prefixes/"

// ErrNestedPrefix is returned by a backend's first transaction when its
// prefix begins with another database's prefix, or another's begins with
// it. Nothing was read or written. The message names the other prefix; if
// that database is gone for good, Drop it (or delete its registry entry,
// the key the message gives, with etcdctl del) and open again.
var ErrNestedPrefix = errors.New("etcdkv: prefix nests with another database's")

// validPrefix refuses a prefix that is empty or begins with NUL, which
// would reach into the registry.
func validPrefix(p string) error {
	if p == "" || p[0] == 0 {
		return fmt.Errorf("%w: prefix %q is empty or begins with NUL (kept for the registry of prefixes)", ErrInvalidOptions, p)
	}
	return nil
}

// Prefix-check states of a Backend.
const (
	prefixUnchecked = iota
	prefixChecked   // no nesting seen; not recorded (only read so far)
	prefixRecorded  // recorded in the registry: checked for good
)

// checkPrefix runs once per backend before its first transaction (and
// again before its first write, to record the prefix): it refuses a prefix
// that nests with a recorded one.
func (b *Backend) checkPrefix(ctx context.Context, record bool) error {
	want := int32(prefixChecked)
	if record {
		want = prefixRecorded
	}
	if b.prefixState.Load() >= want {
		return nil
	}
	b.prefixMu.Lock()
	defer b.prefixMu.Unlock()
	if b.prefixState.Load() >= want {
		return nil
	}
	for attempt := 1; ; attempt++ {
		done, err := b.checkPrefixOnce(ctx, record)
		switch {
		case denied(err):
			b.prefixState.Store(prefixRecorded) // see denied
			return nil
		case err != nil && (!retryable(err) || attempt >= b.opts.MaxAttempts):
			return err
		case done:
			return nil
		case err == nil && attempt >= b.opts.MaxAttempts:
			return fmt.Errorf("%w: recording the prefix, after %d attempts", ErrConflict, attempt)
		}
		b.backoff(ctx, attempt) // a conflict, or etcd briefly unreachable
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// checkPrefixOnce is one attempt of checkPrefix: done is false when the
// recording conflicted with another.
func (b *Backend) checkPrefixOnce(ctx context.Context, record bool) (done bool, err error) {
	seen, err := b.readRegistry(ctx)
	switch {
	case err != nil:
		return false, err
	case seen.nested != "":
		return false, fmt.Errorf("%w: %q and %q (recorded under %q)",
			ErrNestedPrefix, b.keys.prefix, seen.nested, registryRoot+seen.nested)
	case seen.mine:
		b.prefixState.Store(prefixRecorded)
		return true, nil
	case !record:
		b.prefixState.Store(prefixChecked)
		return true, nil
	}
	ok, err := b.record(ctx, seen.version)
	if ok {
		b.prefixState.Store(prefixRecorded)
	}
	return ok, err
}

// registryView is what the registry says about the backend's prefix.
type registryView struct {
	version int64  // mod revision of the version key (0: absent)
	mine    bool   // the prefix is recorded
	nested  string // a recorded prefix that nests with it ("" if none)
}

// readRegistry reads, at one revision, the version key, every proper
// prefix of the backend's prefix, and the recorded prefixes that begin
// with it: a handful of keys, however many databases the cluster holds.
func (b *Backend) readRegistry(ctx context.Context) (registryView, error) {
	p := b.keys.prefix
	type get struct {
		key    string
		prefix bool
	}
	gets := []get{{registryRoot, false}, {registryRoot + p, true}}
	for i := len(p) - 1; i >= 1; i-- {
		gets = append(gets, get{registryRoot + p[:i], false})
	}
	var v registryView
	rev := int64(0)
	for len(gets) > 0 {
		n := min(len(gets), b.opts.MaxTxOps)
		chunk := make([]clientv3.Op, n)
		for i, g := range gets[:n] {
			opts := []clientv3.OpOption{clientv3.WithKeysOnly()}
			if g.prefix {
				opts = append(opts, clientv3.WithPrefix(), clientv3.WithLimit(2))
			}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			chunk[i] = clientv3.OpGet(g.key, opts...)
		}
		gets = gets[n:]
		cctx, cancel := b.request(ctx)
		resp, err := b.c.Txn(cctx).Then(chunk...).Commit()
		cancel()
		if err != nil {
			return v, fmt.Errorf("etcdkv: read the registry of prefixes: %w", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().GetKvs() {
				k := string(kv.Key)
				switch q := strings.TrimPrefix(k, registryRoot); {
				case k == registryRoot:
					v.version = kv.ModRevision
				case q == p:
					v.mine = true
				case v.nested == "":
					v.nested = q
				}
			}
		}
	}
	return v, nil
}

// record writes the backend's prefix into the registry unless another
// recording happened since version was read (false: read again).
func (b *Backend) record(ctx context.Context, version int64) (bool, error) {
	cctx, cancel := b.request(ctx)
	defer cancel()
	stamp := time.Now().UTC().Format(time.RFC3339)
	resp, err := b.c.Txn(cctx).
		If(clientv3.Compare(clientv3.ModRevision(registryRoot), "=", version)).
		Then(clientv3.OpPut(registryRoot+b.keys.prefix, stamp), clientv3.OpPut(registryRoot, stamp)).
		Commit()
	if err != nil {
		// An unknown outcome is harmless: the next transaction reads the
		// registry again and finds the prefix recorded, or records it.
		return false, fmt.Errorf("etcdkv: record the prefix: %w", err)
	}
	return resp.Succeeded, nil
}

// Drop deletes, in one etcd transaction, every key under prefix: the data
// of the database with that prefix, and of any database whose prefix
// begins with it, and their entries in the registry of prefixes, so the
// prefixes may be used again, nested or not. Close the backends that use
// them first. Drop is for databases that are gone for good: tests, bench
// runs, a service retired.
func Drop(ctx context.Context, client *clientv3.Client, prefix string) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	_, err := client.Txn(ctx).Then(
		clientv3.OpDelete(prefix, clientv3.WithPrefix()),
		clientv3.OpDelete(registryRoot+prefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return fmt.Errorf("etcdkv: drop %q: %w", prefix, err)
	}
	return nil
}

// denied reports etcd refusing the registry to this client's user: under
// etcd's RBAC a service is often granted its own prefix and nothing else.
// The check is skipped then (the roles keep the databases apart); grant
// the role read and write on the registry's keys to have it.
func denied(err error) bool { return errors.Is(err, rpctypes.ErrPermissionDenied) }

// Recorded is a database prefix in the registry of prefixes.
type Recorded struct {
	Prefix string `json:"prefix"`
	// At is when a backend recorded it (zero if the entry was not written
	// by one).
	At time.Time `json:"recorded_at"`
}

// Prefixes lists the registry of prefixes: every database prefix a backend
// recorded on the cluster, in key order, for an operator to see what
// shares it (oncekv prefixes --etcd). At most limit entries (0: all).
func Prefixes(ctx context.Context, client *clientv3.Client, limit int) ([]Recorded, error) {
	opts := []clientv3.OpOption{clientv3.WithRange(prefixEnd(registryRoot)), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	// From the first key after the version key: the registry's entries.
	resp, err := client.Get(ctx, registryRoot+"\x00", opts...)
	if err != nil {
		return nil, fmt.Errorf("etcdkv: read the registry of prefixes: %w", err)
	}
	out := make([]Recorded, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r := Recorded{Prefix: strings.TrimPrefix(string(kv.Key), registryRoot)}
		r.At, _ = time.Parse(time.RFC3339, string(kv.Value))
		out = append(out, r)
	}
	return out, nil
}
