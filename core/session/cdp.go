package session

import (
	"context"
	"errors"
	"fmt"
	"sync"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"

	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/cdpproxy"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/errcode"
)

// The session as a CDP proxy's client drives it (core/cdpproxy): the
// proxy declares what it needs (cdpproxy.Sessions, cdpproxy.Session) and
// the manager answers with the session behind this adapter, so that a CDP
// client's tabs, input and viewport take the session's own paths.

var _ cdpproxy.Sessions = (*Manager)(nil)

// CDPSession is the session id for the CDP proxy.
func (m *Manager) CDPSession(id string) (cdpproxy.Session, error) {
	s, err := m.Get(id)
	if err != nil {
		return nil, errcode.Wrap(errcode.NotFound, err, "no such session")
	}
	return cdpSession{s}, nil
}

type cdpSession struct{ s *Session }

func (c cdpSession) Done() <-chan struct{} { return c.s.Done() }

func (c cdpSession) DialBrowser(ctx context.Context) (*browser.BrowserConn, string, error) {
	c.s.mu.Lock()
	b, root, st := c.s.browser, c.s.root, c.s.state
	c.s.mu.Unlock()
	if st != StateReady || b == nil || root == nil {
		return nil, "", errcode.Newf(errcode.NotReady, "the session is %s", st)
	}
	conn, err := b.DialConn(ctx)
	if err != nil {
		return nil, "", err
	}
	return conn, root.BrowserContextID(), nil
}

func (c cdpSession) DownloadDir() string { return c.s.downloads }

// RestoreDownloads sets the session's download behavior again on the
// browser's shared connection (Chromium resets a context's behavior when
// the connection that changed it closes).
func (c cdpSession) RestoreDownloads(ctx context.Context) error {
	c.s.mu.Lock()
	root := c.s.root
	c.s.mu.Unlock()
	if root == nil {
		return nil
	}
	conn, err := c.s.BrowserConn(ctx)
	if err != nil {
		return err
	}
	dl := cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorDeny, BrowserContextID: cdp.BrowserContextID(root.BrowserContextID())}
	if c.s.downloads != "" {
		dl.Behavior, dl.DownloadPath = cdpbrowser.SetDownloadBehaviorBehaviorAllow, c.s.downloads
	}
	_, err = cdp.Call(ctx, conn, cdpbrowser.SetDownloadBehavior, dl)
	return err
}

func (c cdpSession) CheckURL(ctx context.Context, url string) error {
	return c.s.m.cfg.Input.CheckURL(ctx, url)
}

func (c cdpSession) Tabs() []cdpproxy.Tab {
	tabs := c.s.Tabs()
	out := make([]cdpproxy.Tab, 0, len(tabs))
	for _, t := range tabs {
		out = append(out, cdpproxy.Tab{ID: t.ID, URL: t.URL, Title: t.Title, Current: t.Current})
	}
	return out
}

func (c cdpSession) OpenTab(ctx context.Context, url string) (string, error) {
	ti, err := c.s.TabNew(ctx, url, false)
	if err != nil {
		return "", tabErr(err)
	}
	return ti.ID, nil
}

func (c cdpSession) CloseTab(ctx context.Context, targetID string) error {
	return tabErr(c.s.CloseTab(ctx, targetID))
}

func (c cdpSession) SwitchTab(ctx context.Context, targetID string) error {
	return tabErr(c.s.SwitchPage(ctx, targetID))
}

// tabErr gives the tab errors their stable codes.
func tabErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrTooManyTabs):
		return errcode.Wrap(errcode.TooManyTabs, err, fmt.Sprintf("the session has %d tabs already", MaxTabs))
	case errors.Is(err, ErrLastTab):
		return errcode.Wrap(errcode.NotAllowed, err, "the session's last tab stays open (close the session instead)")
	case errors.Is(err, ErrNoTab):
		return errcode.Wrap(errcode.NotFound, err, "no such tab in this session")
	case errors.Is(err, ErrNotReady):
		return errcode.Wrap(errcode.NotReady, err, "the session is not ready")
	}
	if _, ok := errcode.As(err); ok {
		return err
	}
	return errcode.Wrap(errcode.BrowserUnavailable, err, "the browser did not open the tab")
}

func (c cdpSession) OpenProducer(name string) (cdpproxy.Producer, error) {
	p, err := c.s.OpenProducer(dispatch.KindAgent, name, nil)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (c cdpSession) AgentMayAct() error {
	if err := c.s.AgentMayAct(); err != nil {
		return errcode.Wrap(errcode.HumanInControl, err, "a person holds control of this session")
	}
	return nil
}

func (c cdpSession) InputViewport() (int, int) { return c.s.InputViewport() }

// maxPresent bounds the presence table (the proxy's per-session
// connection bound bounds it first).
const maxPresent = 64

// Present lists name among the session's agents until gone is called.
func (c cdpSession) Present(name string) (gone func()) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.present == nil {
		s.present = map[string]int{}
	}
	if s.present[name] == 0 && len(s.present) >= maxPresent {
		return func() {}
	}
	s.present[name]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.present[name]--; s.present[name] <= 0 {
				delete(s.present, name)
			}
		})
	}
}
