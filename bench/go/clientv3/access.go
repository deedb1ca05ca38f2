// The access settings of a user's own cluster (TLS files, a user and its password), shared by
// both drivers: bench/go/clientv3/access.go and bench/go/src/etcdhabench/clientv3driver/access.go
// are the same file (a test in bench/src/goclient.rs keeps them so). It needs nothing of
// clientv3, whose import path differs between the two.

package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// passwordEnv names the environment variable the password comes in: never a flag, since the
// command line of every process is readable by every user of the machine (/proc/<pid>/cmdline).
const passwordEnv = "ETCD_HA_BENCH_PASSWORD"

// access is how the driver reaches the cluster beyond its URLs.
type access struct {
	// tls is nil for plain http endpoints; never nil when any endpoint is https.
	tls *tls.Config
	// user and password are empty without auth.
	user, password string
}

// accessFrom builds the TLS configuration (server certificates always verified: against cacert
// when given, else the system's roots) and takes the password from the environment. Any TLS
// file, or any https endpoint, means TLS for every endpoint: an https URL is never dialed in
// plain text, and TLS files with an http URL are refused rather than ignored.
func accessFrom(endpoints []string, cacert, cert, key, user string) (access, error) {
	var a access
	secure, plain := 0, 0
	for _, ep := range endpoints {
		if strings.HasPrefix(ep, "https://") {
			secure++
		} else {
			plain++
		}
	}
	wantTLS := secure > 0 || cacert != "" || cert != "" || key != ""
	if wantTLS && plain > 0 {
		return a, errors.New("TLS asked for (https endpoints or TLS files), but some endpoints are not https://")
	}
	if (cert == "") != (key == "") {
		return a, errors.New("-cert and -key go together")
	}
	if wantTLS {
		a.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		if cacert != "" {
			pem, err := os.ReadFile(cacert)
			if err != nil {
				return a, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return a, fmt.Errorf("%s: no PEM certificate", cacert)
			}
			a.tls.RootCAs = pool
		}
		if cert != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return a, err
			}
			a.tls.Certificates = []tls.Certificate{pair}
		}
	}
	if user != "" {
		a.user, a.password = user, os.Getenv(passwordEnv)
		if a.password == "" {
			return a, fmt.Errorf("-user %s without a password in $%s", user, passwordEnv)
		}
		if a.tls == nil {
			return a, errors.New("a password would cross http:// in plain text; use https endpoints")
		}
	}
	return a, nil
}
