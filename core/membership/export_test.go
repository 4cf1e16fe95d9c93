package membership

// Crash stops gossiping without leaving, as a killed daemon or a dead
// node would.
func (m *Membership) Crash() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	close(m.done)
	err := m.ml.Shutdown()
	m.transport.close()
	return err
}
