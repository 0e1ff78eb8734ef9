package relay

import (
	"net"
	"testing"
	"time"
)

func TestQuotaPerUser(t *testing.T) {
	leakCheck(t)
	cfg := testConfig(t)
	cfg["maxAllocationsPerUser"] = 2
	p := startPlugin(t, cfg)

	var clients []*turnClient
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, peer := range []string{"p1", "p2"} {
		clients = append(clients, mustAllocate(t, p.udpAddr(), mint(t, p, "alice", peer)))
	}
	c3 := mint(t, p, "alice", "p3")
	third, err := allocate(t, p.udpAddr(), c3.Username, c3.Password)
	clients = append(clients, third)
	if err == nil {
		t.Fatal("third allocation of alice succeeded, want refused")
	}
	if code := turnCode(err); code != 486 {
		t.Fatalf("third allocation: %v (code %d), want 486 Allocation Quota Reached", err, code)
	}
	t.Logf("third allocation refused: %v", err)
	if st := status(t, p); st.QuotaRejects != 1 || st.AllocationsActive != 2 {
		t.Errorf("stats %+v, want 1 quota reject and 2 active", st)
	}
	// Another user still allocates.
	clients = append(clients, mustAllocate(t, p.udpAddr(), mint(t, p, "bob", "p1")))
	// Freeing one of alice's allocations frees a slot.
	clients[0].relay.Close()
	clients[0].relay = nil
	eventually(t, "the closed allocation to go", func() bool { return status(t, p).AllocationsActive == 2 })
	clients = append(clients, mustAllocate(t, p.udpAddr(), mint(t, p, "alice", "p4")))
}

func TestQuotaTotal(t *testing.T) {
	leakCheck(t)
	cfg := testConfig(t)
	cfg["maxAllocations"] = 2
	p := startPlugin(t, cfg)
	a := mustAllocate(t, p.udpAddr(), mint(t, p, "u1", "p"))
	defer a.Close()
	b := mustAllocate(t, p.udpAddr(), mint(t, p, "u2", "p"))
	defer b.Close()
	cred := mint(t, p, "u3", "p")
	c, err := allocate(t, p.udpAddr(), cred.Username, cred.Password)
	c.Close()
	if code := turnCode(err); code != 486 {
		t.Fatalf("allocation over maxAllocations: %v, want 486", err)
	}
}

// TestLifetimeCap: an allocation that does not re-authenticate within
// allocationLifetime is closed although pion granted it 10 minutes.
func TestLifetimeCap(t *testing.T) {
	leakCheck(t)
	cfg := testConfig(t)
	cfg["allocationLifetime"] = "2s"
	p := startPlugin(t, cfg)
	tc := mustAllocate(t, p.udpAddr(), mint(t, p, "alice", "p"))
	defer tc.Close()
	start := time.Now()
	eventually(t, "the allocation to be closed", func() bool { return status(t, p).AllocationsActive == 0 })
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Errorf("closed after %v, before the 2s lifetime", d)
	}
	t.Logf("allocation closed after %v", time.Since(start).Round(time.Millisecond))
}

// TestBandwidthCap sends ~1200-byte datagrams through the relay to the
// allowed self port at several times relayKbpsPerAllocation for ~2 s and
// measures what arrives.
func TestBandwidthCap(t *testing.T) {
	leakCheck(t)
	sink := listenUDP(t, false)
	cfg := testConfig(t)
	cfg["relayKbpsPerAllocation"] = 800
	cfg["selfAddresses"] = []string{"127.0.0.1"}
	cfg["selfPorts"] = []int{sink.port()}
	p := startPlugin(t, cfg)
	tc := mustAllocate(t, p.udpAddr(), mint(t, p, "alice", "p"))
	defer tc.Close()

	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sink.port()}
	// Get the permission (and channel) in place first, then drain.
	for range 3 {
		if _, err := tc.relay.WriteTo(make([]byte, 100), dst); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	const size = 1200
	payload := make([]byte, size)
	// send offers 4 × 1200 B every 5 ms (≈ 7.7 Mbit/s, ~10× the cap) for d.
	send := func(d time.Duration) (int, time.Duration) {
		sent := 0
		start := time.Now()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for time.Since(start) < d {
			for range 4 {
				if _, err := tc.relay.WriteTo(payload, dst); err != nil {
					t.Fatal(err)
				}
				sent++
			}
			<-tick.C
		}
		return sent, time.Since(start)
	}
	// Warm up until the bucket's burst is spent, so that what follows
	// measures the steady rate.
	send(500 * time.Millisecond)
	for len(sink.got) > 0 {
		<-sink.got
	}
	before := status(t, p)
	sent, elapsed := send(2 * time.Second)
	time.Sleep(100 * time.Millisecond) // let the last datagrams land
	got := 0
	for len(sink.got) > 0 {
		got += len(<-sink.got)
	}
	offered := float64(sent*size*8) / elapsed.Seconds() / 1000
	delivered := float64(got*8) / elapsed.Seconds() / 1000
	st := status(t, p)
	t.Logf("offered %.0f kbit/s (%d datagrams), delivered %.0f kbit/s (%d bytes) in %v; cap 800 kbit/s; bandwidth drops %d",
		offered, sent, delivered, got, elapsed.Round(time.Millisecond), st.BandwidthDrops-before.BandwidthDrops)
	if offered < 3*800 {
		t.Fatalf("offered only %.0f kbit/s: the test did not load the cap", offered)
	}
	if delivered < 720 || delivered > 880 {
		t.Errorf("delivered %.0f kbit/s, want within 10%% of 800", delivered)
	}
	if st.BandwidthDrops == before.BandwidthDrops {
		t.Error("no bandwidth drops counted")
	}
}
