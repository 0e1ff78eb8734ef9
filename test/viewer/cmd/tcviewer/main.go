// Command tcviewer watches a Tabcast session with the Go test viewer and
// prints the viewer.Result as one JSON line on stdout. Tests run it inside a
// network namespace (ip netns exec NS tcviewer ...).
//
// Exit status: 0 with the JSON line; 1 with the error on stderr (the partial
// result is still printed on stdout); 2 on bad flags (usage on stderr).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/test/viewer"
)

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tcviewer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		url       = fs.String("url", "", "appliance base URL, e.g. https://10.77.0.1:8443 (required)")
		token     = fs.String("token", "", "bearer token")
		session   = fs.String("session", "", "session id (required)")
		codec     = fs.String("codec", "auto", "auto, h264 or vp8")
		watchFor  = fs.Duration("for", 3*time.Second, "how long to count frames after the first one")
		timeout   = fs.Duration("timeout", 30*time.Second, "give up when no frame arrived by then (plus --for)")
		relayOnly = fs.Bool("relay-only", false, "ICE transport policy relay: use TURN relay candidates only")
		noRelay   = fs.Bool("ignore-welcome-ice", false, "do not use the TURN servers the appliance offers")
		caFile    = fs.String("ca-file", "", "PEM certificate(s) to trust for HTTPS/WSS")
		iceUser   = fs.String("ice-user", "", "username for the --ice-server URLs")
		icePass   = fs.String("ice-pass", "", "credential for the --ice-server URLs")
		pli       = fs.Int("pli-after", 0, "send one PLI after that many frames (0: never)")
		iceURLs   listFlag
		ifaces    listFlag
	)
	fs.Var(&iceURLs, "ice-server", "ICE server URL, e.g. turn:10.77.0.1:3478?transport=tcp (repeatable)")
	fs.Var(&ifaces, "iface", "gather host candidates only on this interface (repeatable; lo allowed)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: tcviewer --url URL --session ID [flags]\n\nPrints the viewer result as one JSON line.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *url == "" || *session == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "tcviewer: --url and --session are required; no positional arguments")
		fs.Usage()
		return 2
	}
	o := viewer.Options{
		BaseURL: strings.TrimRight(*url, "/"), Token: *token, SessionID: *session,
		Codec: *codec, For: *watchFor, PLIAfter: *pli, Interfaces: ifaces,
	}
	o.IgnoreWelcomeICE = *noRelay
	if *relayOnly {
		o.ICETransportPolicy = "relay"
	}
	if len(iceURLs) > 0 {
		srv := webrtc.ICEServer{URLs: iceURLs, Username: *iceUser}
		if *icePass != "" {
			srv.Credential = *icePass
		}
		o.ICEServers = []webrtc.ICEServer{srv}
	}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintln(stderr, "tcviewer:", err)
			return 1
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fmt.Fprintf(stderr, "tcviewer: no PEM certificate in %s\n", *caFile)
			return 1
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		o.HTTPClient = &http.Client{Transport: tr}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout+*watchFor)
	defer cancel()
	res, err := viewer.Watch(ctx, o)
	line, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(line))
	if err != nil {
		fmt.Fprintln(stderr, "tcviewer:", err)
		return 1
	}
	return 0
}
