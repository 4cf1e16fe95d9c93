// Package plugintest holds goroutine-safe fakes of the plugin interfaces
// for tests of the code that drives plugins.
package plugintest
