package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/retention"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest/httpprovider"

	"net/http"
)

// The workload: for each operation i of its range, a client (1) creates
// order-i under key create-i (single-transaction path), (2) pays it under
// key pay-i (two-phase path: intent, provider, completion with an outbox
// event), (3) delivers message msg-i to an inbox consumer, (4) files a
// refund intent left to the reconciler, and then acknowledges i in the ack
// log. Between operations the relay publishes, the reconciler runs and
// retention sweeps. Every step retries with the same keys until it has a
// final answer.

type workload struct {
	db     *kv.DB
	l      *ledger.Ledger
	in     *inbox.Inbox
	ob     *outbox.Outbox
	x      *sideeffect.Executor
	relay  *outbox.Relay
	acklog *os.File
}

var (
	ordersB  = []byte("orders")
	createdB = []byte("created")
	appliedB = []byte("applied")
	shippedB = []byte("shipped")
)

func incr(tx kv.Tx, bucket []byte, key string) error {
	b, err := tx.CreateBucketIfNotExists(bucket)
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(b.Get([]byte(key))))
	return b.Put([]byte(key), []byte(strconv.Itoa(n+1)))
}

func openWorkload(path, providerURL, sinkURL, acklog string) (*workload, error) {
	// Durable where the power is cut (TestPowerLoss); SIGKILL leaves the
	// page cache to the disk, and a sync would only slow the suite.
	db, err := kv.Open(path, &kv.Options{NoSync: os.Getenv("CRASH_DURABLE") == "", LockTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	w := &workload{db: db}
	if w.l, err = ledger.New(db, &ledger.Config{Lease: 300 * time.Millisecond, RecoverOrphans: true}); err != nil {
		return nil, err
	}
	if w.in, err = inbox.New(db, nil); err != nil {
		return nil, err
	}
	w.ob = outbox.New(db)
	provider := &httpprovider.Client{BaseURL: providerURL, HTTP: &http.Client{Timeout: 3 * time.Second}}
	w.x, err = sideeffect.New(db, &sideeffect.Config{
		Handlers: map[string]sideeffect.Handler{
			"charge": {Provider: provider, OnSucceeded: w.paid},
			"refund": {Provider: provider},
		},
		Grace: time.Millisecond, Lease: 5 * time.Second, CallTimeout: 3 * time.Second, MaxAttempts: 1000,
		Backoff: sideeffect.Backoff{Base: time.Millisecond, Cap: 20 * time.Millisecond},
	})
	if err != nil {
		return nil, err
	}
	w.relay, err = outbox.NewRelay(w.ob, &outbox.RelayConfig{Publisher: &outbox.WebhookPublisher{URL: sinkURL},
		Retention: time.Millisecond, MaxAttempts: 1000, Backoff: sideeffect.Backoff{Base: time.Millisecond, Cap: 10 * time.Millisecond}})
	if err != nil {
		return nil, err
	}
	w.acklog, err = os.OpenFile(acklog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	return w, err
}

// paid is the charge intent's completion: the order is paid and its event
// joins the outbox, in the transaction that records the provider's answer.
func (w *workload) paid(tx kv.Tx, in *sideeffect.Intent) error {
	var ch struct{ ID string }
	_ = json.Unmarshal(in.Result, &ch)
	b, err := tx.CreateBucketIfNotExists(ordersB)
	if err != nil {
		return err
	}
	if err := b.Put([]byte(in.Subject), []byte("paid:"+ch.ID)); err != nil {
		return err
	}
	_, _, err = w.ob.AddTx(tx, outbox.Event{ID: "paid/" + in.Subject, Topic: "order.paid", Payload: []byte(`{}`)})
	return err
}

func retry(ctx context.Context, what string, fn func() error) error {
	for ctx.Err() == nil {
		err := fn()
		if err == nil {
			return nil
		}
		var pe *sideeffect.PendingError
		if errors.As(err, &pe) || errors.Is(err, ledger.ErrInProgress) || errors.Is(err, sideeffect.ErrBusy) || errors.Is(err, ledger.ErrLeaseLost) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		// A side effect backing off after an unknown outcome: a client
		// retries after the time it was told (a 503 with Retry-After).
		if be := (*sideeffect.BlockedError)(nil); errors.As(err, &be) && be.RetryAfter > 0 {
			time.Sleep(min(be.RetryAfter, time.Second))
			continue
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return ctx.Err()
}

func (w *workload) op(ctx context.Context, i int) error {
	order := fmt.Sprintf("order-%d", i)
	err := retry(ctx, "create", func() error {
		_, err := w.l.Do(ctx, ledger.Request{Scope: "t|POST /orders", Key: fmt.Sprintf("create-%d", i), Fingerprint: ledger.Fingerprint{1}},
			func(tx kv.Tx) (ledger.Response, error) {
				b, err := tx.CreateBucketIfNotExists(ordersB)
				if err != nil {
					return ledger.Response{}, err
				}
				if b.Get([]byte(order)) == nil {
					if err := b.Put([]byte(order), []byte("pending")); err != nil {
						return ledger.Response{}, err
					}
				}
				return ledger.Response{Status: 201, Body: []byte(order)}, incr(tx, createdB, order)
			})
		return err
	})
	if err != nil {
		return err
	}
	payload := []byte(fmt.Sprintf(`{"amount_cents":%d,"currency":"eur","subject":%q}`, 100+i, order))
	err = retry(ctx, "pay", func() error {
		_, err := w.x.Perform(ctx, w.l, ledger.Request{Scope: "t|POST /pay", Key: fmt.Sprintf("pay-%d", i), Fingerprint: ledger.Fingerprint{2}},
			sideeffect.Spec{Kind: "charge", Subject: order, Scope: "t", Key: order, Purpose: "charge", Payload: payload},
			func(_ kv.Tx, in *sideeffect.Intent) (ledger.Response, error) {
				return ledger.Response{Status: 200, Body: in.Result}, nil
			})
		return err
	})
	if err != nil {
		return err
	}
	// A two-phase request whose completion does the work in the database
	// (the managed Claim and Complete).
	err = retry(ctx, "ship", func() error {
		out, err := w.l.Claim(ctx, ledger.Request{Scope: "t|POST /ship", Key: fmt.Sprintf("ship-%d", i), Fingerprint: ledger.Fingerprint{3}})
		if err != nil || out.Replay != nil {
			return err
		}
		_, err = w.l.Complete(ctx, out.Claim, ledger.Response{Status: 200}, func(tx kv.Tx) error { return incr(tx, shippedB, order) })
		return err
	})
	if err != nil {
		return err
	}
	err = retry(ctx, "consume", func() error {
		_, err := w.in.Handle(ctx, "billing", fmt.Sprintf("msg-%d", i), func(tx kv.Tx) error { return incr(tx, appliedB, fmt.Sprintf("msg-%d", i)) })
		return err
	})
	if err != nil {
		return err
	}
	// An event of its own (the managed outbox Add).
	err = retry(ctx, "audit", func() error {
		_, _, err := w.ob.Add(ctx, outbox.Event{ID: fmt.Sprintf("consumed/msg-%d", i), Topic: "audit", Payload: []byte(`{}`)})
		return err
	})
	if err != nil {
		return err
	}
	refund := []byte(fmt.Sprintf(`{"amount_cents":1,"currency":"eur","subject":"refund-%d"}`, i))
	err = retry(ctx, "refund", func() error {
		_, _, err := w.x.Create(ctx, sideeffect.Spec{Kind: "refund", Subject: fmt.Sprintf("refund-%d", i), Scope: "t", Key: order, Purpose: "refund", Payload: refund})
		return err
	})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w.acklog, "ack %d\n", i); err != nil {
		return err
	}
	return w.acklog.Sync()
}

// background runs one round of the relay, the reconciler and a sweep.
func (w *workload) background(ctx context.Context) error {
	if _, err := w.x.RunOnce(ctx); err != nil {
		return err
	}
	if _, err := w.relay.RunOnce(ctx); err != nil {
		return err
	}
	_, err := retention.Sweep(ctx, w.db, &retention.Config{Pause: -1}, outbox.RecordKind)
	return err
}

// drain runs the background work until no intent is live and no event is
// pending.
func (w *workload) drain(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := w.background(ctx); err != nil {
			return err
		}
		lag, err := w.ob.Lag(ctx)
		if err != nil {
			return err
		}
		live := 0
		err = w.db.View(ctx, func(tx kv.Tx) error {
			for in, err := range sideeffect.Intents(tx, 0) {
				if err != nil {
					return err
				}
				if !in.State.Final() {
					live++
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if lag.Pending == 0 && live == 0 {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return ctx.Err()
}

// child is the workload process: CRASH_RANGE=from:to, CRASH_DRAIN=1.
func child() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := openWorkload(os.Getenv("CRASH_DB"), os.Getenv("CRASH_PROVIDER"), os.Getenv("CRASH_SINK"), os.Getenv("CRASH_ACKLOG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 3
	}
	from, to, _ := strings.Cut(os.Getenv("CRASH_RANGE"), ":")
	a, _ := strconv.Atoi(from)
	b, _ := strconv.Atoi(to)
	// What a crash left behind is finished first, by asking the provider.
	if err := w.background(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "recover:", err)
		return 4
	}
	for i := a; i < b; i++ {
		if err := w.op(ctx, i); err != nil {
			fmt.Fprintln(os.Stderr, "op:", err)
			return 5
		}
		if err := w.background(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "background:", err)
			return 6
		}
	}
	if os.Getenv("CRASH_DRAIN") != "" {
		if err := w.drain(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "drain:", err)
			return 7
		}
	}
	// Every invariant, checked by the process that ran the work: its
	// in-memory state too (the tenants' usage it counted since it opened
	// the file, after taking over what the crash left, against the
	// records).
	problems, err := w.db.Check(ctx, inspect.Checkers()...)
	if err != nil || len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "check:", err, problems)
		return 9
	}
	_ = w.acklog.Close()
	if err := w.db.Close(); err != nil {
		return 8
	}
	return 0
}

func readAcks(path string) (map[int]bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[int]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	acks := map[int]bool{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if n, ok := strings.CutPrefix(s.Text(), "ack "); ok {
			i, err := strconv.Atoi(n)
			if err != nil {
				return nil, err
			}
			acks[i] = true
		}
	}
	return acks, s.Err()
}
