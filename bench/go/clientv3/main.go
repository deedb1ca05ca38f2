// Command clientv3driver runs etcd's Go client (clientv3 3.6, go.etcd.io/etcd/client/v3, built
// in module mode from go.mod here) for the failover benchmark, and for lease-scale-bench
// (leases.go, which only this driver has). bench/go/src/etcdhabench/ holds the same driver for
// clientv3 3.4 (Debian's GOPATH sources); apart from leases.go the two differ only in their
// import paths and in how they learn their client's version, and speak the same protocol, so
// bench/src/goclient.rs drives either. The Rust side sends one command per line on stdin and
// reads one answer per line on stdout, tagged with the command's id, so that any number of
// calls can be in flight at once (a goroutine each, one shared client, as a Go service would
// use it).
//
// Commands (keys and values never contain spaces):
//
//	<id> put <key> <value>      -> <id> ok | <id> err <kind>
//	<id> get <key> s|l          -> <id> ok | <id> err <kind>   (s: serializable, l: linearizable)
//	<id> watch <prefix>         -> <id> ev <key> <mod_revision> ... then <id> end <reason>
//	<id> lease <ttl_seconds>    -> <id> granted <lease_id>, <id> renewed <ttl> ..., <id> end <reason>
//	<id> alive <lease_id>       -> <id> ok <remaining_ttl> | <id> err <kind>
//	<id> elect <key>            -> <id> elected, <id> lost <reason>, <id> elected, ... (forever)
//
// and, in this driver only, the lease-scale commands of leases.go (leases, leases-status,
// leases-sample, usage).
//
// The client is configured as a careful Go user would: a dial timeout, HTTP/2 keepalive at
// the shortest interval etcd accepts, and the caller's deadline on every call (a context).
// Everything else is clientv3's default: in 3.5+, gRPC's own round-robin balancer over every
// endpoint and clientv3's retry interceptor (unary reads retried on Unavailable, writes only
// when they never left the client).
//
// Your own cluster: -cacert, -cert and -key give TLS (verification always on, and https
// endpoints never go plain), -user a user whose password comes from $ETCD_HA_BENCH_PASSWORD,
// never from the command line, where any process on the machine could read it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var out = struct {
	sync.Mutex
	w *bufio.Writer
}{w: bufio.NewWriter(os.Stdout)}

// say writes one answer line and flushes it at once: the Rust side times calls by it.
func say(format string, args ...interface{}) {
	out.Lock()
	defer out.Unlock()
	fmt.Fprintf(out.w, format+"\n", args...)
	out.w.Flush()
}

// kind names an error the way the benchmark's report counts them.
func kind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "Timeout"
	}
	if errors.Is(err, context.Canceled) {
		return "Canceled"
	}
	switch rpctypes.Error(err) {
	case rpctypes.ErrNoLeader:
		return "NoLeader"
	case rpctypes.ErrLeaderChanged:
		return "LeaderChanged"
	case rpctypes.ErrTimeout:
		return "ServerTimeout"
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return "grpc_" + s.Code().String()
	}
	return strings.ReplaceAll(strings.Fields(err.Error() + " error")[0], ":", "")
}

func main() {
	endpoints := flag.String("endpoints", "", "comma-separated client URLs")
	deadline := flag.Duration("deadline", time.Second, "the caller's deadline on every call")
	cacert := flag.String("cacert", "", "PEM file of the CA that signed the members' certificates")
	cert := flag.String("cert", "", "PEM client certificate, for mutual TLS")
	key := flag.String("key", "", "PEM key of -cert")
	user := flag.String("user", "", "etcd user; its password comes from $"+passwordEnv)
	showVersion := flag.Bool("version", false, "print the clientv3 version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(clientVersion())
		return
	}
	urls := strings.Split(*endpoints, ",")
	a, err := accessFrom(urls, *cacert, *cert, *key, *user)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientv3driver:", err)
		os.Exit(1)
	}

	// clientv3 logs every retry at warn level; the report counts what reaches the caller.
	logs := zap.NewProductionConfig()
	logs.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	cli, err := clientv3.New(clientv3.Config{
		LogConfig:            &logs,
		Endpoints:            urls,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: time.Second,
		TLS:                  a.tls,
		Username:             a.user,
		Password:             a.password,
		// Only notes where LeaseKeepAlive streams go (leases.go): lease-scale-bench faults
		// the member serving clientv3's one keep-alive stream.
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(recordLeaseStream)},
	})
	if err != nil {
		// clientv3's errors name the endpoint and the cause, never the password.
		fmt.Fprintln(os.Stderr, "clientv3.New:", err)
		os.Exit(1)
	}
	defer cli.Close()
	say("0 ready")

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<20)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) < 2 {
			fmt.Fprintln(os.Stderr, "bad command:", in.Text())
			continue
		}
		id, args := f[0], f[1:]
		go run(cli, *deadline, id, args)
	}
}

// clientVersion is the clientv3 module this binary was built with ("3.6.16"), from the build
// information Go records in module mode.
func clientVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "go.etcd.io/etcd/client/v3" {
				return strings.TrimPrefix(dep.Version, "v")
			}
		}
	}
	return "unknown"
}

// run carries out one command and answers it.
func run(cli *clientv3.Client, deadline time.Duration, id string, args []string) {
	switch {
	case args[0] == "put" && len(args) == 3:
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		answer(id, func() error { _, err := cli.Put(ctx, args[1], args[2]); return err }())
	case args[0] == "get" && len(args) == 3:
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		var opts []clientv3.OpOption
		if args[2] == "s" {
			opts = append(opts, clientv3.WithSerializable())
		}
		answer(id, func() error { _, err := cli.Get(ctx, args[1], opts...); return err }())
	case args[0] == "watch" && len(args) == 2:
		watch(cli, id, args[1])
	case args[0] == "lease" && len(args) == 2:
		ttl, _ := strconv.ParseInt(args[1], 10, 64)
		lease(cli, deadline, id, ttl)
	case args[0] == "elect" && len(args) == 2:
		elect(cli, id, args[1])
	case args[0] == "alive" && len(args) == 2:
		lid, _ := strconv.ParseInt(args[1], 10, 64)
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		r, err := cli.TimeToLive(ctx, clientv3.LeaseID(lid))
		if err != nil {
			say("%s err %s", id, kind(err))
			return
		}
		say("%s ok %d", id, r.TTL)
	case args[0] == "leases" && len(args) == 3:
		n, errN := strconv.ParseInt(args[1], 10, 64)
		ttl, errTTL := strconv.ParseInt(args[2], 10, 64)
		if errN != nil || errTTL != nil || n < 0 || ttl <= 0 {
			say("%s err BadCommand", id)
			return
		}
		grantLeases(cli, deadline, id, n, ttl)
	case args[0] == "leases-status" && len(args) == 2:
		leasesStatus(id, args[1])
	case args[0] == "leases-sample" && len(args) == 3:
		leasesSample(id, args[1], args[2])
	case args[0] == "usage" && len(args) == 1:
		usage(id)
	default:
		say("%s err BadCommand", id)
	}
}

func answer(id string, err error) {
	if err != nil {
		say("%s err %s", id, kind(err))
		return
	}
	say("%s ok", id)
}

// watch watches a prefix as a Go service does: one Watch call, whose channel clientv3 keeps
// open across member failures (it resumes from the last revision itself), until it closes.
func watch(cli *clientv3.Client, id, prefix string) {
	for resp := range cli.Watch(context.Background(), prefix, clientv3.WithPrefix()) {
		if err := resp.Err(); err != nil {
			say("%s end %s", id, kind(err))
			return
		}
		for _, ev := range resp.Events {
			say("%s ev %s %d", id, ev.Kv.Key, ev.Kv.ModRevision)
		}
	}
	say("%s end channel-closed", id)
}

// lease grants a lease and keeps it with KeepAlive, clientv3's own renewal loop, reporting
// every renewal it sees; the channel closes when the lease is gone or cannot be renewed.
func lease(cli *clientv3.Client, deadline time.Duration, id string, ttl int64) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	granted, err := cli.Grant(ctx, ttl)
	cancel()
	if err != nil {
		say("%s end grant-%s", id, kind(err))
		return
	}
	say("%s granted %d", id, granted.ID)
	renewals, err := cli.KeepAlive(context.Background(), granted.ID)
	if err != nil {
		say("%s end keepalive-%s", id, kind(err))
		return
	}
	for r := range renewals {
		say("%s renewed %d", id, r.TTL)
	}
	say("%s end channel-closed", id)
}

// elect holds the leadership of key as a Go service does with clientv3's concurrency package:
// a session (a lease of 5 s that clientv3 keeps alive), Campaign, and leadership until the
// session is done (its lease lost or expired); then a new session and a new campaign.
func elect(cli *clientv3.Client, id, key string) {
	for {
		session, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
		if err != nil {
			say("%s lost session-%s", id, kind(err))
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-session.Done()
			cancel()
		}()
		if err := concurrency.NewElection(session, key).Campaign(ctx, "go-clientv3"); err != nil {
			say("%s lost campaign-%s", id, kind(err))
			cancel()
			session.Close()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		say("%s elected", id)
		<-session.Done()
		say("%s lost session-done", id)
		cancel()
	}
}
