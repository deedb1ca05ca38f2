// The go-clientv3 driver of failover-bench: etcd's own Go client (clientv3, etcd 3.4) behind a
// line protocol on stdin and stdout, so the Rust benchmark can run it side by side with the
// others. Built offline in GOPATH mode from Debian's golang-etcd-server-dev (see
// bench/src/goclient.rs); not a module on purpose.
//
// Usage: driver <endpoints, comma-separated>
//
// Requests, one per line, tab-separated: <id> <op> <deadline ms> <key> [<value>], op one of
// put, get-linearizable, get-serializable. Each runs in a goroutine of its own, bounded by its
// deadline; answers come in completion order: <id> ok, or <id> err <kind>. The first line
// written is "ready" once a first Get succeeded, or "failed <reason>".
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
	"google.golang.org/grpc/status"
)

// dialTimeout bounds clientv3.New and the first Get: the setting every clientv3 example sets.
const dialTimeout = 5 * time.Second

func main() {
	if len(os.Args) != 2 {
		fmt.Println("failed usage: driver <endpoints>")
		os.Exit(2)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Args[1], ","),
		DialTimeout: dialTimeout,
	})
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	answer := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		out.WriteString(line + "\n")
		out.Flush()
	}
	if err != nil {
		answer("failed " + oneLine(err.Error()))
		os.Exit(1)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	_, err = cli.Get(ctx, "etcd-ha-bench-go-ready")
	cancel()
	if err != nil {
		answer("failed " + oneLine(err.Error()))
		os.Exit(1)
	}
	answer("ready")
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		fields := strings.Split(in.Text(), "\t")
		if len(fields) < 4 {
			continue
		}
		go func(fields []string) {
			id := fields[0]
			ms, err := strconv.Atoi(fields[2])
			if err != nil {
				answer(id + "\terr\tbad request")
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
			defer cancel()
			switch fields[1] {
			case "put":
				value := ""
				if len(fields) > 4 {
					value = fields[4]
				}
				_, err = cli.Put(ctx, fields[3], value)
			case "get-linearizable":
				_, err = cli.Get(ctx, fields[3])
			case "get-serializable":
				_, err = cli.Get(ctx, fields[3], clientv3.WithSerializable())
			default:
				err = errors.New("unknown op")
			}
			if err == nil {
				answer(id + "\tok")
			} else {
				answer(id + "\terr\t" + kind(err))
			}
		}(fields)
	}
}

// kind is a short, stable name for an error: "deadline", "grpc <code>", or the text.
func kind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "deadline"
	}
	if s, ok := status.FromError(err); ok {
		return "grpc " + s.Code().String()
	}
	return oneLine(err.Error())
}

// oneLine keeps an error on one line of the protocol.
func oneLine(text string) string {
	return strings.NewReplacer("\n", " ", "\t", " ").Replace(text)
}
