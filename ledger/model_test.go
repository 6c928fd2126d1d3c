package ledger_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/retention"
)

// Times move in whole seconds and every lease and expiry ends on a half
// second, so no deadline ever falls on "now".
const (
	modelLease     = 2500 * time.Millisecond
	modelRetention = 4500 * time.Millisecond
)

var (
	modelScopes = []string{"acme|POST /v1/orders", "globex|POST /v1/orders"}
	modelKeys   = []string{"k1", "k2"}
	errWork     = errors.New("work failed")
)

// modelRecord is what the model expects stored under a scope and key.
type modelRecord struct {
	completed  bool
	fp         byte
	version    uint64
	owner      int       // the incarnation that wrote the claim (index into incarnations)
	lease      time.Time // zero once completed
	created    time.Time
	finishedAt time.Time // zero while in progress
	expires    time.Time
	resp       ledger.Response
}

// verdict is what an attempt finds under its key.
type verdict int

const (
	runs verdict = iota
	replays
	mismatches
	inProgress
	overQuota
)

// modelQuota is the one tenant with a quota when the input asks for one:
// one record, live or expired and not yet swept.
const modelQuota = "acme"

type ledgerModel struct {
	recs    map[string]*modelRecord // scope + "/" + key; expired ones until swept
	applied map[string]int          // business writes per scope/key
	gen     int                     // the current incarnation's index
	// takeOrphans: a live claim of an earlier incarnation is taken over at
	// once (Config.RecoverOrphans on a single-writer backend).
	takeOrphans bool
	quota       bool // modelQuota may keep one record
}

// stored is how many records tenant keeps, expired ones not yet swept
// included: what its quota counts.
func (m *ledgerModel) stored(tenant string) int64 {
	var n int64
	for id := range m.recs {
		if ledger.TenantOf(id) == tenant {
			n++
		}
	}
	return n
}

// judge applies the ledger's rules: a live completed record with the same
// fingerprint replays, a live record with another is a mismatch, a live
// claim is in progress unless its lease ended (or its process died and
// orphans are taken over); anything else runs.
func (m *ledgerModel) judge(id string, fp byte, now time.Time) (v verdict, prev *modelRecord, takeover bool) {
	r := m.recs[id]
	switch {
	case r == nil && m.quota && ledger.TenantOf(id) == modelQuota && m.stored(modelQuota) >= 1:
		return overQuota, nil, false // a new record, refused before any work
	case r == nil:
		return runs, nil, false
	case !now.Before(r.expires):
		return runs, r, false
	case r.fp != fp:
		return mismatches, r, false
	case r.completed:
		return replays, r, false
	case !now.Before(r.lease) || (m.takeOrphans && r.owner != m.gen):
		return runs, r, true
	default:
		return inProgress, r, false
	}
}

// owned reports whether a claim of version still owns id's record.
func (m *ledgerModel) owned(id string, version uint64, now time.Time) bool {
	r := m.recs[id]
	return r != nil && now.Before(r.expires) && !r.completed && r.version == version
}

func nextVersion(prev *modelRecord) uint64 {
	if prev == nil {
		return 1
	}
	return prev.version + 1
}

// modelResponse is the response of step's work: its body large enough to
// be compressed when big is set.
func modelResponse(step int, id string, big bool) ledger.Response {
	body := fmt.Appendf(nil, `{"step":%d,"id":%q}`, step, id)
	if big {
		body = bytes.Repeat(body, 4096/len(body)+1)
	}
	return ledger.Response{Status: 200 + step%7, Header: http.Header{"X-Step": {strconv.Itoa(step)}}, Body: body}
}

// modelWork counts a business write for id, or fails.
func modelWork(id string, fails bool) func(tx kv.Tx) error {
	return func(tx kv.Tx) error {
		if fails {
			return errWork
		}
		return kvtest.Increment(tx, "applied", id)
	}
}

// FuzzLedgerAgainstAModel plays Do, DoTx in a caller's transaction that
// commits or rolls back, Claim, Complete, Release and Extend (with claims
// kept and used late, after takeovers and reopens), Peek, clock moves,
// sweeps and reopens against a model of the ledger's rules, with work that
// succeeds or fails, responses small or compressed, and a tenant held to
// one record or not. After every step it compares every answer (replays
// byte for byte, the errors' fields) and the whole stored state: each
// record's status, fingerprint, version, owner, times and response, the
// business writes (once per key while its record counts), and each
// tenant's usage against the records it holds.
func FuzzLedgerAgainstAModel(f *testing.F) {
	// The first byte sets RecoverOrphans (bit 0) and a quota (bit 1); then
	// pairs of (op, arg).
	f.Add([]byte{0, 0, 0, 0, 0, 0, 4, 6, 0, 7, 2, 7, 2, 0, 0})                               // Do, replay, mismatch, Peek, past the retention, runs again as version 2
	f.Add([]byte{0, 2, 0, 2, 0, 0, 0, 3, 0, 0, 0, 6, 0})                                     // claim, in progress twice, complete, replay
	f.Add([]byte{0, 2, 0, 7, 2, 2, 0, 3, 0, 3, 1, 0, 0})                                     // claim, lease ends, takeover, the first claim's completion refused
	f.Add([]byte{1, 2, 0, 9, 0, 2, 0, 3, 1, 0, 0})                                           // claim, reopen, the orphan taken over at once
	f.Add([]byte{0, 1, 0x20, 0, 0x80, 0, 0x40, 0, 0, 6, 0})                                  // a rolled-back DoTx, failing work, a compressed response replayed
	f.Add([]byte{0, 2, 0, 7, 1, 5, 0, 7, 1, 5, 0, 3, 0, 8, 0, 7, 2, 8, 0, 7, 1, 8, 0, 0, 0}) // extend twice, complete, sweeps before and after the retention
	f.Add([]byte{0, 2, 0, 4, 0, 0, 0, 2, 4, 7, 2, 7, 2, 8, 0, 2, 0x10})                      // release, run, a claim that mismatches, sweep, claim anew
	f.Add([]byte{0, 0, 1, 0, 2, 1, 3, 2, 1, 9, 0, 0, 3, 6, 1})                               // both tenants, both keys, a reopen
	f.Add([]byte{1, 2, 0, 2, 0, 0, 0, 9, 0, 3, 0})                                           // RecoverOrphans: this process's own live claim stays in progress; completed after a reopen, it keeps its owner
	f.Add([]byte{0, 2, 0, 7, 2, 7, 1, 3, 0, 5, 0, 4, 0})                                     // a claim past its record's retention is lost: completion, extension and release refused
	// A quota of one record for acme (bit 1): new keys refused until a sweep
	// removes the expired record; an expired record is replaced without
	// asking; Peek asks nothing; another tenant is not bound.
	f.Add([]byte{2, 0, 0, 0, 2, 2, 2, 6, 2, 0, 1, 7, 2, 7, 2, 0, 2, 0, 0, 0, 2, 7, 2, 7, 2, 8, 0, 0, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 || len(data) == 0 {
			return
		}
		clock := kvtest.NewManualClock(t0)
		path := filepath.Join(t.TempDir(), "ledger.db")
		opts := &kv.Options{NoSync: true, Clock: clock}
		cfg := &ledger.Config{Lease: modelLease, Retention: modelRetention, RecoverOrphans: data[0]&1 != 0}
		if data[0]&2 != 0 {
			cfg.Quota = &ledger.Quota{For: func(tenant string) (int64, int64) {
				if tenant == modelQuota {
					return 1, 0
				}
				return 0, 0
			}}
		}
		db := kvtest.OpenPath(t, path, opts, ledger.RecordKind)
		open := func() *ledger.Ledger {
			l, err := ledger.New(db, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		l := open()
		m := &ledgerModel{recs: map[string]*modelRecord{}, applied: map[string]int{},
			takeOrphans: cfg.RecoverOrphans && db.Traits().SingleWriter, quota: cfg.Quota != nil}
		incarnations := []uuid.UUID{db.Incarnation()}
		var claims []*ledger.Claim
		input := &kvtest.Input{Data: data[1:]}
		next := input.Next
		for step := 0; input.More(); step++ {
			op, arg := next()%10, next()
			scope, key := modelScopes[arg&1], modelKeys[(arg>>1)&1]
			id := scope + "/" + key
			fpb := 1 + (arg>>2)&1
			req := ledger.Request{Scope: scope, Key: key, Fingerprint: ledger.Fingerprint{fpb}}
			fails, big, rollback := arg&0x80 != 0, arg&0x40 != 0, arg&0x20 != 0
			now := clock.Now()
			what := fmt.Sprintf("step %d: op %d (arg %#x) on %s", step, op, arg, id)
			resp := modelResponse(step, id, big)
			claim := func() *ledger.Claim { // a claim handed out earlier, or one never handed out
				if len(claims) == 0 {
					return &ledger.Claim{Scope: scope, Key: key, Fingerprint: req.Fingerprint, Version: 1}
				}
				return claims[int(arg)%len(claims)]
			}
			switch op {
			case 0, 1: // Do, or DoTx in a transaction that commits or rolls back
				work := modelWork(id, fails)
				w := func(tx kv.Tx) (ledger.Response, error) { return resp, work(tx) }
				var res ledger.Result
				var err error
				if op == 0 {
					rollback = false
					res, err = l.Do(ctx, req, w)
				} else {
					err = db.Update(ctx, func(tx kv.Tx) error {
						if res, err = l.DoTx(ctx, tx, req, w); err != nil || !rollback {
							return err
						}
						return errRollback
					})
					if errors.Is(err, errRollback) {
						err = nil
					}
				}
				v, prev, takeover := m.judge(id, fpb, now)
				expectRejection(t, what, m, v, prev, fpb, now, err)
				switch {
				case v == replays:
					expectResult(t, what, res, err, prev.resp, prev.version, true, false)
				case v != runs:
				case fails && !errors.Is(err, errWork):
					t.Fatalf("%s: failing work, but %+v, %v", what, res, err)
				case fails:
				default:
					expectResult(t, what, res, err, resp, nextVersion(prev), false, takeover)
					if !rollback {
						m.recs[id] = &modelRecord{completed: true, fp: fpb, version: nextVersion(prev), owner: m.gen,
							created: now, finishedAt: now, expires: now.Add(modelRetention), resp: resp}
						m.applied[id]++
					}
				}
			case 2: // Claim
				out, err := l.Claim(ctx, req)
				v, prev, takeover := m.judge(id, fpb, now)
				expectRejection(t, what, m, v, prev, fpb, now, err)
				switch v {
				case replays:
					if out.Claim != nil || out.Replay == nil {
						t.Fatalf("%s: a replay expected, Claim gave %+v, %v", what, out, err)
					}
					expectResult(t, what, *out.Replay, err, prev.resp, prev.version, true, false)
				case runs:
					c := out.Claim
					if err != nil || c == nil || out.Replay != nil {
						t.Fatalf("%s: a claim expected, Claim gave %+v, %v", what, out, err)
					}
					rec := &modelRecord{fp: fpb, version: nextVersion(prev), owner: m.gen, lease: now.Add(modelLease),
						created: now, expires: now.Add(modelRetention)}
					want := ledger.Claim{Scope: scope, Key: key, Fingerprint: req.Fingerprint, Version: rec.version,
						LeaseExpiresAt: rec.lease, CreatedAt: now}
					if takeover {
						rec.created = prev.created
						want.CreatedAt, want.Takeover, want.PreviousOwner = prev.created, true, incarnations[prev.owner]
						want.Orphaned = db.Traits().SingleWriter && prev.owner != m.gen
					}
					if !reflect.DeepEqual(*c, want) {
						t.Fatalf("%s: Claim gave\n%+v\nthe model's\n%+v", what, *c, want)
					}
					m.recs[id] = rec
					if claims = append(claims, c); len(claims) > 6 {
						claims = claims[1:]
					}
				}
			case 3: // Complete a claim, with work that may fail
				c := claim()
				cid := c.Scope + "/" + c.Key
				res, err := l.Complete(ctx, c, resp, modelWork(cid, fails))
				switch {
				case !m.owned(cid, c.Version, now):
					expectLeaseLost(t, what, m, cid, c, now, err)
				case fails && !errors.Is(err, errWork):
					t.Fatalf("%s: failing work, but Complete gave %+v, %v", what, res, err)
				case fails:
				default:
					expectResult(t, what, res, err, resp, c.Version, false, false)
					r := m.recs[cid]
					r.completed, r.lease, r.finishedAt, r.expires, r.resp = true, time.Time{}, now, now.Add(modelRetention), resp
					m.applied[cid]++
				}
			case 4: // Release a claim
				c := claim()
				cid := c.Scope + "/" + c.Key
				err := l.Release(ctx, c)
				if !m.owned(cid, c.Version, now) {
					expectLeaseLost(t, what, m, cid, c, now, err)
				} else if err != nil {
					t.Fatalf("%s: Release of a claim that owns its record: %v", what, err)
				} else {
					delete(m.recs, cid)
				}
			case 5: // Extend a claim
				c := claim()
				cid := c.Scope + "/" + c.Key
				before := c.LeaseExpiresAt
				err := l.Extend(ctx, c)
				switch {
				case !m.owned(cid, c.Version, now):
					expectLeaseLost(t, what, m, cid, c, now, err)
					if !c.LeaseExpiresAt.Equal(before) {
						t.Fatalf("%s: a refused Extend moved the claim's lease to %v", what, c.LeaseExpiresAt)
					}
				case err != nil || !c.LeaseExpiresAt.Equal(now.Add(modelLease)):
					t.Fatalf("%s: Extend gave %v, lease %v; the model's %v", what, err, c.LeaseExpiresAt, now.Add(modelLease))
				default:
					r := m.recs[cid]
					r.lease = now.Add(modelLease)
					if e := now.Add(modelRetention); e.After(r.expires) {
						r.expires = e
					}
				}
			case 6: // Peek
				got, err := l.Peek(ctx, req)
				v, prev, _ := m.judge(id, fpb, now)
				if v == overQuota {
					v = runs // Peek writes nothing: no quota is asked
				}
				expectRejection(t, what, m, v, prev, fpb, now, err)
				switch {
				case v == replays && got == nil:
					t.Fatalf("%s: a replay expected, Peek gave nil, %v", what, err)
				case v == replays:
					expectResult(t, what, *got, err, prev.resp, prev.version, true, false)
				case v == runs && (got != nil || err != nil):
					t.Fatalf("%s: the request must run, Peek gave %+v, %v", what, got, err)
				}
			case 7:
				clock.Advance(time.Duration(int(arg)%3+1) * time.Second)
			case 8:
				if _, err := retention.Sweep(ctx, db, &retention.Config{MaxTxTime: time.Hour}, ledger.RecordKind); err != nil {
					t.Fatalf("%s: sweep: %v", what, err)
				}
				for id, r := range m.recs {
					if !now.Before(r.expires) {
						delete(m.recs, id)
					}
				}
			case 9:
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = kvtest.OpenPath(t, path, opts, ledger.RecordKind)
				l = open()
				incarnations = append(incarnations, db.Incarnation())
				m.gen++
			}
			compareLedger(t, what, db, l, m, incarnations)
		}
	})
}

// expectRejection checks err against a verdict that writes nothing: a
// mismatch names both fingerprints, an in-progress conflict the claim's
// version and lease. Other verdicts expect no rejection.
func expectRejection(t *testing.T, what string, m *ledgerModel, v verdict, prev *modelRecord, fp byte, now time.Time, err error) {
	t.Helper()
	var me *ledger.MismatchError
	var ip *ledger.InProgressError
	var qe *ledger.QuotaError
	switch v {
	case overQuota:
		if !errors.As(err, &qe) || qe.Tenant != modelQuota || qe.Usage.Records != m.stored(modelQuota) || qe.MaxRecords != 1 {
			t.Fatalf("%s: %s over its quota of one record expected, got %v", what, modelQuota, err)
		}
	case mismatches:
		if !errors.As(err, &me) || me.Stored != (ledger.Fingerprint{prev.fp}) || me.Got != (ledger.Fingerprint{fp}) {
			t.Fatalf("%s: a mismatch with %d expected, got %v", what, prev.fp, err)
		}
	case inProgress:
		if !errors.As(err, &ip) || ip.Version != prev.version || !ip.LeaseExpiresAt.Equal(prev.lease) ||
			ip.RetryAfter <= 0 || ip.RetryAfter > prev.lease.Sub(now) {
			t.Fatalf("%s: in progress at version %d (lease %v) expected, got %+v", what, prev.version, prev.lease, err)
		}
	default:
		if errors.As(err, &me) || errors.As(err, &ip) || errors.Is(err, ledger.ErrLeaseLost) || errors.As(err, &qe) {
			t.Fatalf("%s: no rejection expected (model: %+v), got %v", what, m.recs, err)
		}
	}
}

// expectLeaseLost checks the refusal of a claim that no longer owns its
// record: the versions claimed and stored, and the stored status.
func expectLeaseLost(t *testing.T, what string, m *ledgerModel, id string, c *ledger.Claim, now time.Time, err error) {
	t.Helper()
	want := ledger.LeaseLostError{Scope: c.Scope, Key: c.Key, Claimed: c.Version}
	if r := m.recs[id]; r != nil && now.Before(r.expires) {
		want.Current, want.Status = r.version, ledger.StatusInProgress
		if r.completed {
			want.Status = ledger.StatusCompleted
		}
	}
	var ll *ledger.LeaseLostError
	if !errors.As(err, &ll) || *ll != want {
		t.Fatalf("%s: lease lost %+v expected, got %v", what, want, err)
	}
}

// expectResult checks a result against the response and version the model
// expects, the bytes of a replay included.
func expectResult(t *testing.T, what string, res ledger.Result, err error, resp ledger.Response, version uint64, replayed, takeover bool) {
	t.Helper()
	switch {
	case err != nil:
		t.Fatalf("%s: %v", what, err)
	case res.Replayed != replayed || res.Version != version || res.Takeover != takeover:
		t.Fatalf("%s: replayed %t, version %d, takeover %t; the model's %t, %d, %t", what,
			res.Replayed, res.Version, res.Takeover, replayed, version, takeover)
	case !sameResponse(res.Response, resp):
		t.Fatalf("%s: response %d %v %.60q; the model's %d %v %.60q", what,
			res.Response.Status, res.Response.Header, res.Response.Body, resp.Status, resp.Header, resp.Body)
	}
}

func sameResponse(a, b ledger.Response) bool {
	return a.Status == b.Status && reflect.DeepEqual(a.Header, b.Header) && bytes.Equal(a.Body, b.Body)
}

// compareLedger checks every stored record (expired ones not yet swept
// included), the business writes and each tenant's usage against the
// model.
func compareLedger(t *testing.T, at string, db *kv.DB, l *ledger.Ledger, m *ledgerModel, incarnations []uuid.UUID) {
	t.Helper()
	var stored map[string]*ledger.Record
	var counts map[string]int
	var bytesOf map[string]int64
	err := db.View(ctx, func(tx kv.Tx) error {
		// A read run again (etcd) starts afresh.
		stored, bytesOf = map[string]*ledger.Record{}, map[string]int64{}
		for r, err := range l.Records(tx, ledger.ListOptions{IncludeExpired: true, WithBody: true}) {
			if err != nil {
				return err
			}
			stored[r.Scope+"/"+r.Key] = r
			bytesOf[ledger.TenantOf(r.Scope)] += int64(r.StoredBytes)
		}
		counts = kvtest.Counters(tx, "applied")
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", at, err)
	}
	if len(stored) != len(m.recs) {
		t.Fatalf("%s: %d records stored, the model has %d: %v against %v", at, len(stored), len(m.recs), stored, m.recs)
	}
	for id, want := range m.recs {
		got := stored[id]
		if got == nil {
			t.Fatalf("%s: %s is not stored; the model has %+v", at, id, want)
		}
		status := ledger.StatusInProgress
		if want.completed {
			status = ledger.StatusCompleted
		}
		switch {
		case got.Status != status || got.Fingerprint != (ledger.Fingerprint{want.fp}) || got.Version != want.version ||
			got.Owner != incarnations[want.owner]:
			t.Fatalf("%s: %s stored %v fp %x version %d owner %v; the model's %v fp %d version %d owner %v", at, id,
				got.Status, got.Fingerprint[0], got.Version, got.Owner, status, want.fp, want.version, incarnations[want.owner])
		case !got.LeaseExpiresAt.Equal(want.lease) || !got.CreatedAt.Equal(want.created) ||
			!got.CompletedAt.Equal(want.finishedAt) || !got.ExpiresAt.Equal(want.expires):
			t.Fatalf("%s: %s stored lease %v created %v completed %v expires %v; the model's %v %v %v %v", at, id,
				got.LeaseExpiresAt, got.CreatedAt, got.CompletedAt, got.ExpiresAt, want.lease, want.created, want.finishedAt, want.expires)
		case want.completed && (got.Response == nil || !sameResponse(*got.Response, want.resp)):
			t.Fatalf("%s: %s stored response %+v; the model's %d %.60q", at, id, got.Response, want.resp.Status, want.resp.Body)
		case !want.completed && got.Response != nil:
			t.Fatalf("%s: %s is in progress with a response %+v", at, id, got.Response)
		}
	}
	for id, n := range m.applied {
		if counts[id] != n {
			t.Fatalf("%s: %s's work applied %d times; the model says %d", at, id, counts[id], n)
		}
	}
	if len(counts) != len(m.applied) {
		t.Fatalf("%s: business writes %v; the model's %v", at, counts, m.applied)
	}
	for _, scope := range modelScopes {
		tenant := ledger.TenantOf(scope)
		var n int64
		for id := range m.recs {
			if strings.HasPrefix(id, scope+"/") {
				n++
			}
		}
		u, err := l.Usage(ctx, tenant)
		if err != nil || u.Records != n || u.Bytes != bytesOf[tenant] {
			t.Fatalf("%s: %s's usage %+v, %v; its records: %d, %d bytes", at, tenant, u, err, n, bytesOf[tenant])
		}
	}
}
