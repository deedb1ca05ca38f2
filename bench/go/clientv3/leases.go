// Many leases kept at once, for lease-scale-bench: one set of N leases, each granted with
// Grant and kept with clientv3's own KeepAlive and a goroutine draining its channel (what a Go
// service does), counted so that a poll costs the same at 100 or 100,000 leases.
//
// Commands (only this 3.6 driver has them; the 3.4 one answers err BadCommand):
//
//	<id> leases <n> <ttl_seconds>    -> <id> ok set=<id> granted=<n> failed=<n>
//	<id> leases-status <set>         -> <id> ok lost=<n> at-risk=<n> closed=<n> renewals=<n> stream=<addr|->
//	<id> leases-sample <set> <max>   -> <id> ok <lease_id> ...   (up to max leases still held)
//	<id> usage                       -> <id> ok cpu-us=<n> rss-kb=<n>   (this process's)
//
// A lease is lost when its channel closed (clientv3 closes it when the server says the lease
// is gone, or when no renewal was answered for a TTL) or when no renewal was answered for a
// TTL; it is at risk when less than a third of the TTL is left. clientv3 hands over answers,
// not send times, so "answered" is when the answer reached the driver's goroutine.

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// grantsInFlight is how many grants are in flight at once, as for the Rust clients.
const grantsInFlight = 64

// slotWidth is the resolution of the counts: leases are counted by the 100 ms slot of their
// last answer, the bench's polling interval, so that a poll sums about TTL/100 ms slots
// instead of walking every lease.
const slotWidth = 100 * time.Millisecond

// closedSlot marks a lease whose channel has closed: it is in no slot, and counted in closed.
const closedSlot = -1

// leaseStream is the member address ("127.0.0.1:2379") of the last LeaseKeepAlive stream
// opened, so that the bench can fault the member that serves it: clientv3 keeps all its
// leases on one stream, placed by gRPC's round-robin balancer on any member.
var leaseStream atomic.Pointer[string]

// recordLeaseStream is a stream interceptor that notes where each LeaseKeepAlive stream went.
// It only reads the stream's peer, which clientv3's own send loop reads as well.
func recordLeaseStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err == nil && method == "/etcdserverpb.Lease/LeaseKeepAlive" {
		if p, ok := peer.FromContext(s.Context()); ok && p.Addr != nil {
			addr := p.Addr.String()
			leaseStream.Store(&addr)
		}
	}
	return s, err
}

// leaseSet is one set of leases and what its channels have said. One mutex guards it all: a
// renewal takes it once, briefly (a few map updates), and a poll sums the slots under it.
type leaseSet struct {
	ttl   time.Duration
	epoch time.Time

	mu sync.Mutex
	// ids are the granted leases, in grant order.
	ids []clientv3.LeaseID
	// last is each lease's slot of its last answer (its grant's send before the first),
	// or closedSlot.
	last []int64
	// bySlot counts the leases of open channels by the slot of their last answer; a slot
	// without leases is deleted, so it holds about TTL/slotWidth entries.
	bySlot map[int64]int
	// closed counts the leases whose channel closed.
	closed int
	// renewals counts the answers delivered on the channels.
	renewals int64
}

// sets holds the lease sets by the id of the command that granted them.
var sets = struct {
	sync.Mutex
	m map[string]*leaseSet
}{m: map[string]*leaseSet{}}

// slot is the slot of t.
func (s *leaseSet) slot(t time.Time) int64 {
	return int64(t.Sub(s.epoch) / slotWidth)
}

// add records a granted lease, its grant sent in slot sent; its index.
func (s *leaseSet) add(id clientv3.LeaseID, sent int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, id)
	s.last = append(s.last, sent)
	s.bySlot[sent]++
	return len(s.ids) - 1
}

// move takes lease i out of its slot and puts it in slot to (closedSlot: closed).
func (s *leaseSet) move(i int, to int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := s.last[i]
	if from == closedSlot {
		return
	}
	if to != closedSlot {
		s.renewals++
	}
	if from == to {
		return
	}
	if s.bySlot[from]--; s.bySlot[from] == 0 {
		delete(s.bySlot, from)
	}
	if to == closedSlot {
		s.closed++
	} else {
		s.bySlot[to]++
	}
	s.last[i] = to
}

// follow drains lease i's keep-alive channel until clientv3 closes it.
func (s *leaseSet) follow(i int, answers <-chan *clientv3.LeaseKeepAliveResponse) {
	for range answers {
		s.move(i, s.slot(time.Now()))
	}
	s.move(i, closedSlot)
}

// left is the time left to a lease last answered in slot, counted from the slot's start (the
// earliest the answer can have come) to now.
func (s *leaseSet) left(slot int64, now time.Time) time.Duration {
	return s.epoch.Add(time.Duration(slot)*slotWidth + s.ttl).Sub(now)
}

// status counts the lost and at-risk leases now, in about TTL/slotWidth steps.
func (s *leaseSet) status() (lost, atRisk, closed int, renewals int64) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for slot, n := range s.bySlot {
		switch left := s.left(slot, now); {
		case left <= 0:
			lost += n
		case left < s.ttl/3:
			atRisk += n
		}
	}
	return lost + s.closed, atRisk, s.closed, s.renewals
}

// sample is up to max leases still held (channel open, answered within the TTL), spread
// evenly over the set. It walks every lease: the bench asks once, at the end.
func (s *leaseSet) sample(max int) []clientv3.LeaseID {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var held []clientv3.LeaseID
	for i, slot := range s.last {
		if slot != closedSlot && s.left(slot, now) > 0 {
			held = append(held, s.ids[i])
		}
	}
	if len(held) <= max {
		return held
	}
	picked := make([]clientv3.LeaseID, 0, max)
	for k := 0; k < max; k++ {
		picked = append(picked, held[k*len(held)/max])
	}
	return picked
}

// grantLeases grants n leases of ttl seconds, grantsInFlight at a time, starts KeepAlive for
// each as soon as it is granted, and answers once all are granted (or failed).
func grantLeases(cli *clientv3.Client, deadline time.Duration, id string, n, ttl int64) {
	s := &leaseSet{
		ttl:    time.Duration(ttl) * time.Second,
		epoch:  time.Now(),
		bySlot: map[int64]int{},
	}
	var next, failed atomic.Int64
	var workers sync.WaitGroup
	for w := 0; w < grantsInFlight; w++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for next.Add(1) <= n {
				sent := s.slot(time.Now())
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				granted, err := cli.Grant(ctx, ttl)
				cancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				i := s.add(granted.ID, sent)
				answers, err := cli.KeepAlive(context.Background(), granted.ID)
				if err != nil {
					// The lessor has halted: this lease will not be kept.
					s.move(i, closedSlot)
					continue
				}
				go s.follow(i, answers)
			}
		}()
	}
	workers.Wait()
	sets.Lock()
	sets.m[id] = s
	sets.Unlock()
	say("%s ok set=%s granted=%d failed=%d", id, id, n-failed.Load(), failed.Load())
}

// leaseSetNamed is the set granted by command set, if any.
func leaseSetNamed(set string) *leaseSet {
	sets.Lock()
	defer sets.Unlock()
	return sets.m[set]
}

// leasesStatus answers leases-status.
func leasesStatus(id, set string) {
	s := leaseSetNamed(set)
	if s == nil {
		say("%s err NoSuchSet", id)
		return
	}
	lost, atRisk, closed, renewals := s.status()
	stream := "-"
	if addr := leaseStream.Load(); addr != nil {
		stream = *addr
	}
	say("%s ok lost=%d at-risk=%d closed=%d renewals=%d stream=%s",
		id, lost, atRisk, closed, renewals, stream)
}

// leasesSample answers leases-sample.
func leasesSample(id, set, max string) {
	limit, err := strconv.Atoi(max)
	if err != nil || limit < 0 {
		say("%s err BadCommand", id)
		return
	}
	s := leaseSetNamed(set)
	if s == nil {
		say("%s err NoSuchSet", id)
		return
	}
	words := []string{id, "ok"}
	for _, lease := range s.sample(limit) {
		words = append(words, strconv.FormatInt(int64(lease), 10))
	}
	say("%s", strings.Join(words, " "))
}

// usage answers usage: this process's CPU time (user + system, getrusage) and resident memory
// (VmRSS), so that the bench charges the Go client, not itself.
func usage(id string) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		say("%s err Getrusage", id)
		return
	}
	micros := func(t syscall.Timeval) int64 { return int64(t.Sec)*1_000_000 + int64(t.Usec) }
	say("%s ok cpu-us=%d rss-kb=%d", id, micros(ru.Utime)+micros(ru.Stime), residentKB())
}

// residentKB is VmRSS from /proc/self/status, 0 if unreadable.
func residentKB() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(rest, &kb)
			return kb
		}
	}
	return 0
}
