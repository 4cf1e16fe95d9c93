package controlplane

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig renders cfg as a self-contained kubeconfig (certificates and
// keys inlined) with one context named "switchyard-test".
func Kubeconfig(cfg *rest.Config) ([]byte, error) {
	const name = "switchyard-test"
	caData, err := fileOrData(cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile)
	if err != nil {
		return nil, err
	}
	certData, err := fileOrData(cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.CertFile)
	if err != nil {
		return nil, err
	}
	keyData, err := fileOrData(cfg.TLSClientConfig.KeyData, cfg.TLSClientConfig.KeyFile)
	if err != nil {
		return nil, err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: caData,
		TLSServerName:            cfg.TLSClientConfig.ServerName,
		InsecureSkipTLSVerify:    cfg.TLSClientConfig.Insecure,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: certData,
		ClientKeyData:         keyData,
		Token:                 cfg.BearerToken,
		TokenFile:             cfg.BearerTokenFile,
		Impersonate:           cfg.Impersonate.UserName,
		ImpersonateGroups:     cfg.Impersonate.Groups,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	kc.CurrentContext = name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig: %w", err)
	}
	return data, nil
}

// WriteKubeconfig writes cfg as a kubeconfig to path, atomically: the file
// appears complete or not at all, so a script can wait for it to exist.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	data, err := Kubeconfig(cfg)
	if err != nil {
		return err
	}
	return writeAtomic(path, data, 0o600)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func fileOrData(data []byte, file string) ([]byte, error) {
	if len(data) > 0 || file == "" {
		return data, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s for kubeconfig: %w", file, err)
	}
	return b, nil
}
