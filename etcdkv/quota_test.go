package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// quotaReq is a new request of tenant acme.
func quotaReq(key string) ledger.Request {
	return ledger.Request{Scope: "acme|POST /v1/orders", Key: key, Fingerprint: ledger.Fingerprint{1}}
}

func created(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil }

// quotaLedgers returns two replicas' ledgers on one cluster and prefix,
// with quota q; a's reads its time from clock.
func quotaLedgers(t *testing.T, q ledger.Quota, clock kv.Clock) (la, lb *ledger.Ledger, a *etcdkv.Backend) {
	t.Helper()
	a, b, _ := twoProcesses(t, etcdkv.Options{})
	var err error
	if la, err = ledger.New(dbOn(t, a, &kv.Options{Clock: clock}), &ledger.Config{Quota: &q}); err != nil {
		t.Fatal(err)
	}
	if lb, err = ledger.New(dbOn(t, b, nil), &ledger.Config{Quota: &q}); err != nil {
		t.Fatal(err)
	}
	return la, lb, a
}

// meanwhile is work that, the first time it runs, has the other replica's
// ledger lb store a new record of the tenant under key; runs counts its
// runs.
func meanwhile(lb *ledger.Ledger, key string, runs *int) ledger.Work {
	return func(tx kv.Tx) (ledger.Response, error) {
		if *runs++; *runs == 1 {
			if _, err := lb.Do(context.Background(), quotaReq(key), created); err != nil {
				return ledger.Response{}, err
			}
		}
		return created(tx)
	}
}

func usageOf(t *testing.T, l *ledger.Ledger) int64 {
	t.Helper()
	u, err := l.Usage(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	return u.Records
}

// A check far from the bound reads none of the tenant's counters in its
// transaction, so a new record that another replica stores for the
// tenant meanwhile does not refuse its commit; with MaxCountAge negative
// every check reads them, and the commit is refused and runs again. On a
// busy tenant that was every commit (ledger.Quota.MaxCountAge).
func TestQuotaFarFromTheBoundConflictsWithNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		quota ledger.Quota
		runs  int
	}{
		{"relied on", ledger.Quota{MaxRecords: 100}, 1},
		{"a bound of bytes alone, relied on", ledger.Quota{MaxBytes: 1 << 20}, 1},
		{"read in every check", ledger.Quota{MaxRecords: 100, MaxCountAge: -1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			la, lb, a := quotaLedgers(t, tc.quota, nil)
			if _, err := la.Do(ctx, quotaReq("a-0"), created); err != nil {
				t.Fatal(err)
			}
			before := a.Stats()
			runs := 0
			_, err := la.Do(ctx, quotaReq("a-1"), meanwhile(lb, "b-0", &runs))
			if err != nil {
				t.Fatal(err)
			}
			if runs != tc.runs {
				t.Errorf("the work ran %d times, want %d", runs, tc.runs)
			}
			if conflicts := a.Stats().Conflicts - before.Conflicts; conflicts != uint64(tc.runs-1) {
				t.Errorf("%d commits refused, want %d", conflicts, tc.runs-1)
			}
			if n := usageOf(t, la); n != 3 {
				t.Errorf("usage %d records, want 3", n)
			}
		})
	}
}

// Near the bound every check reads the count in its transaction: two
// replicas racing for a tenant's last record cannot both have it.
func TestQuotaLastRecordGoesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	la, lb, _ := quotaLedgers(t, ledger.Quota{MaxRecords: 4}, nil)
	for i := range 3 {
		if _, err := la.Do(ctx, quotaReq(fmt.Sprint("a-", i)), created); err != nil {
			t.Fatal(err)
		}
	}
	runs := 0
	_, err := la.Do(ctx, quotaReq("a-3"), meanwhile(lb, "b-0", &runs))
	if !errors.Is(err, ledger.ErrQuotaExceeded) {
		t.Fatalf("a's request for the record b took: %v, want ErrQuotaExceeded", err)
	}
	if runs != 1 {
		t.Errorf("a's work ran %d times, want once (its commit refused, its check then refuses it)", runs)
	}
	if n := usageOf(t, la); n != 4 {
		t.Errorf("usage %d records, want the bound, 4", n)
	}
}

// What the relaxation costs, as documented: a replica relies on its count
// for up to MaxCountAge, so records another replica adds in that time are
// not seen, and the tenant can pass the bound by them; once the count is
// older, the next check reads it and refuses.
func TestQuotaPassedOnlyWithinTheCountAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := kvtest.NewManualClock(time.Now())
	la, lb, _ := quotaLedgers(t, ledger.Quota{MaxRecords: 16, MaxCountAge: time.Minute}, clock)
	if _, err := la.Do(ctx, quotaReq("a-0"), created); err != nil {
		t.Fatal(err) // a reads the count: 0
	}
	for i := range 15 {
		if _, err := lb.Do(ctx, quotaReq(fmt.Sprint("b-", i)), created); err != nil {
			t.Fatalf("b's record %d: %v", i, err)
		}
	}
	if _, err := lb.Do(ctx, quotaReq("b-15"), created); !errors.Is(err, ledger.ErrQuotaExceeded) {
		t.Fatalf("b at the bound: %v, want ErrQuotaExceeded", err)
	}
	// a knows of 1 record, read a moment ago: far from 16.
	if _, err := la.Do(ctx, quotaReq("a-1"), created); err != nil {
		t.Fatalf("a within its count's age: %v", err)
	}
	if n := usageOf(t, la); n != 17 {
		t.Fatalf("usage %d records, want 17: one past the bound, added on a count b's records were not in", n)
	}
	clock.Advance(time.Minute)
	if _, err := la.Do(ctx, quotaReq("a-2"), created); !errors.Is(err, ledger.ErrQuotaExceeded) {
		t.Fatalf("a with its count a minute old: %v, want ErrQuotaExceeded", err)
	}
}

// Many checks of a tenant at once on a fresh ledger: the first reads the
// count, the others wait for that read, and every request is admitted
// and counted exactly once (run with -race).
func TestQuotaChecksAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	la, _, _ := quotaLedgers(t, ledger.Quota{MaxRecords: 1000}, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Go(func() {
			if _, err := la.Do(ctx, quotaReq(fmt.Sprint("k-", i)), created); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := usageOf(t, la); n != 32 {
		t.Errorf("usage %d records, want 32", n)
	}
}
