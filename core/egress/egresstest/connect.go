// Package egresstest has what tests of the egress wall share: a CONNECT
// proxy standing for a company's upstream proxy.
package egresstest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Dial connects to a CONNECT target (net.DialTimeout, or a dial made
// inside a network namespace).
type Dial func(network, addr string, timeout time.Duration) (net.Conn, error)

// ServeConnect serves ln as a CONNECT-only proxy: each request is told to
// asked (its method, target and Proxy-Authorization), a CONNECT is
// tunnelled to its target through dial, anything else answered 405. The
// returned stop closes ln and every tunnel and waits for them.
func ServeConnect(ln net.Listener, dial Dial, asked func(method, target, auth string)) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveOne(c, dial, asked, done)
			}()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done); ln.Close() })
		wg.Wait()
	}
}

func serveOne(c net.Conn, dial Dial, asked func(method, target, auth string), done <-chan struct{}) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	asked(req.Method, req.Host, req.Header.Get("Proxy-Authorization"))
	if req.Method != http.MethodConnect {
		fmt.Fprint(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	up, err := dial("tcp", req.Host, 5*time.Second)
	if err != nil {
		fmt.Fprint(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	fmt.Fprint(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-done:
		case <-stop:
		}
		up.Close()
		c.Close()
	}()
	go func() { _, _ = io.Copy(up, br); up.Close(); c.Close() }()
	_, _ = io.Copy(c, up)
}
