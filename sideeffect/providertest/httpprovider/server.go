package httpprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/oncekv/oncekv/kv"
)

// Charge is one charge the provider made.
type Charge struct {
	ID             string    `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	AmountCents    int64     `json:"amount_cents"`
	Currency       string    `json:"currency"`
	Subject        string    `json:"subject"`
	Status         string    `json:"status"`
	CreatedAt      time.Time `json:"created_at"`
}

// Faults are the probabilities of injected failures on POST /v1/charges.
type Faults struct {
	FailRate float64 // answer 503 before charging
	LoseRate float64 // charge, then drop the connection without answering
}

// Server is the provider's HTTP API.
type Server struct {
	db     *kv.DB
	faults Faults
	mu     sync.Mutex // serialises the fault dice and charge numbering
	rng    *rand.Rand
}

var chargesBucket = []byte("charges")

// New returns a Server storing charges in db.
func New(db *kv.DB, faults Faults, seed uint64) *Server {
	return &Server{db: db, faults: faults, rng: rand.New(rand.NewPCG(seed, seed^0xfa17))} //nolint:gosec // fault dice, seeded
}

// Handler returns the API:
//
//	POST /v1/charges                    charge (Idempotency-Key required)
//	GET  /v1/charges/{idempotency_key}  status of one key (404 if never charged)
//	GET  /v1/charges                    every charge
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", s.charge)
	mux.HandleFunc("GET /v1/charges/{key}", s.get)
	mux.HandleFunc("GET /v1/charges", s.list)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) roll() (fail, lose bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rng.Float64()
	return r < s.faults.FailRate, r >= s.faults.FailRate && r < s.faults.FailRate+s.faults.LoseRate
}

func (s *Server) charge(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Idempotency-Key required"})
		return
	}
	var in struct {
		AmountCents int64  `json:"amount_cents"`
		Currency    string `json:"currency"`
		Subject     string `json:"subject"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil || json.Unmarshal(body, &in) != nil || in.AmountCents <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid charge"})
		return
	}
	if existing, err := s.lookup(r.Context(), key); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	} else if existing != nil {
		writeJSON(w, http.StatusOK, existing) // the same key: the same charge, never a second one
		return
	}
	fail, lose := s.roll()
	if fail {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "provider unavailable, nothing charged"})
		return
	}
	var ch *Charge
	err = s.db.Update(r.Context(), func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(chargesBucket)
		if err != nil {
			return err
		}
		if v := b.Get([]byte(key)); v != nil { // a concurrent request with the same key won
			ch = new(Charge)
			return json.Unmarshal(v, ch)
		}
		n, err := b.NextSequence()
		if err != nil {
			return err
		}
		ch = &Charge{ID: fmt.Sprintf("ch_%06d", n), IdempotencyKey: key, AmountCents: in.AmountCents,
			Currency: in.Currency, Subject: in.Subject, Status: "succeeded", CreatedAt: time.Now().UTC()}
		v, err := json.Marshal(ch)
		if err != nil {
			return err
		}
		return b.Put([]byte(key), v)
	})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	if lose {
		// The charge is committed; the caller never hears about it.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	writeJSON(w, http.StatusCreated, ch)
}

func (s *Server) lookup(ctx context.Context, key string) (*Charge, error) {
	var ch *Charge
	err := s.db.View(ctx, func(tx kv.Tx) error {
		b := tx.Bucket(chargesBucket)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(key))
		if v == nil {
			return nil
		}
		ch = new(Charge)
		return json.Unmarshal(v, ch)
	})
	return ch, err
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	ch, err := s.lookup(r.Context(), r.PathValue("key"))
	switch {
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	case ch == nil:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not_found"})
	default:
		writeJSON(w, http.StatusOK, ch)
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	charges, err := s.All(r.Context())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, charges)
}

// All returns every charge in key order.
func (s *Server) All(ctx context.Context) ([]Charge, error) {
	out := []Charge{}
	err := s.db.View(ctx, func(tx kv.Tx) error {
		out = out[:0] // a read run again (etcd) starts afresh
		b := tx.Bucket(chargesBucket)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var ch Charge
			if err := json.Unmarshal(v, &ch); err != nil {
				return fmt.Errorf("charge %q: %w", k, err)
			}
			out = append(out, ch)
		}
		return nil
	})
	return out, err
}

// ErrBadFaults is returned by Validate.
var ErrBadFaults = errors.New("fakeprovider: fault rates must be in [0, 1] and sum to at most 1")

// Validate checks the rates.
func (f Faults) Validate() error {
	if f.FailRate < 0 || f.LoseRate < 0 || f.FailRate+f.LoseRate > 1 {
		return ErrBadFaults
	}
	return nil
}
