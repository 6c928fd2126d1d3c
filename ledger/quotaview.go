package ledger

import (
	"sync"
	"time"
)

// DefaultQuotaCountAge is Quota.MaxCountAge's default.
const DefaultQuotaCountAge = time.Second

// maxQuotaViews bounds the tenants whose count a ledger remembers for its
// quota checks; past it, one is forgotten for each new one (and read
// again at its next check).
const maxQuotaViews = 4096

// quotaViews is what a ledger on a store several processes write (etcd)
// remembers of its tenants' usage, so that a check far from the bound
// reads nothing in its transaction.
//
// There, a tenant's usage is the sum of its counters (usageShards of them),
// and a transaction that reads them all is refused at its commit when any
// other transaction writes any one of them in between: every new request
// of the tenant writes one. Reading them in every check made a tenant's
// new requests conflict with each other (oncekv bench --against-etcd
// --quota, 64 clients: 91-94 operations a second instead of 1,868-1,974,
// a p99 of 2.3 s; bench/README.md, "Quotas on etcd").
//
// So each tenant's count is read apart from any transaction (a View, whose
// reads nothing compares), by one check at a time, the others waiting for
// it when they have nothing recent to go by, and read again once it is
// half MaxCountAge old. A check relies on the count last read, plus what
// this process admitted and stored for the tenant since that read was
// asked for, while that read is younger than MaxCountAge and the sum is
// more than an eighth of each bound away from it. Otherwise (near the
// bound, or when no read could be had) it reads the counters in its
// transaction, exact, since the commit compares them.
// What it does not see is what other processes added since the read,
// which is what a bound can be passed by; removals it does not see only
// make it read in its transaction sooner.
type quotaViews struct {
	mu     sync.Mutex
	maxAge time.Duration
	m      map[string]*quotaView
}

// quotaView is one tenant's.
type quotaView struct {
	base  Usage     // the count last read
	at    time.Time // when that read was asked for
	added Usage     // admitted and stored by this process since then

	renewing bool          // a check is reading the count again
	started  time.Time     // when that read was asked for
	during   Usage         // admitted and stored since then
	renewed  chan struct{} // closed when it ends
}

func newQuotaViews(maxAge time.Duration) *quotaViews {
	return &quotaViews{maxAge: maxAge, m: map[string]*quotaView{}}
}

// admit decides whether tenant's new record may be admitted at now from
// what is known: known is true when that is recent enough to be relied on
// and far (which says whether a usage is far from the bounds) says it is;
// the record is then counted as added. renew is true when the caller is
// to read the count again (it is older than half the age allowed, and no
// other check is reading it): it must then call renewed with what it
// read. Unknown while another check reads the count, wait is closed when
// it has (and admit may say more then); unknown otherwise, a check reads
// the count in its transaction.
func (q *quotaViews) admit(tenant string, now time.Time, far func(Usage) bool) (known, renew bool, wait <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.m[tenant]
	if v == nil {
		if len(q.m) >= maxQuotaViews {
			for t, old := range q.m {
				if !old.renewing {
					delete(q.m, t)
					break
				}
			}
		}
		v = &quotaView{}
		q.m[tenant] = v
	}
	age := now.Sub(v.at)
	recent := !v.at.IsZero() && age >= 0 && age < q.maxAge
	if !v.renewing && (!recent || age >= q.maxAge/2) {
		v.renewing, v.during, v.started, v.renewed, renew = true, Usage{}, now, make(chan struct{}), true
	}
	switch {
	case recent && far(v.base.plus(v.added)):
		v.add(Usage{Records: 1})
		known = true
	case !recent && !renew:
		wait = v.renewed
	}
	return known, renew, wait
}

// renewed ends a read admit asked for: u is the count read (if err is
// nil), on top of which everything this process added since admit asked
// for it is counted.
func (q *quotaViews) renewed(tenant string, u Usage, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.m[tenant]
	if v == nil || !v.renewing {
		return
	}
	v.renewing = false
	close(v.renewed)
	if err == nil {
		v.base, v.at, v.added = u, v.started, v.during
	}
}

// add counts what this process admitted or stored for tenant.
func (q *quotaViews) add(tenant string, u Usage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if v := q.m[tenant]; v != nil {
		v.add(u)
	}
}

func (v *quotaView) add(u Usage) {
	v.added = v.added.plus(u)
	if v.renewing {
		v.during = v.during.plus(u)
	}
}

func (u Usage) plus(o Usage) Usage {
	return Usage{Records: u.Records + o.Records, Bytes: u.Bytes + o.Bytes}
}
