"""What dataprep, loaders, training and bench share and none of them owns: files written whole (atomic), how a
command stops (stopping), paths that stay inside a folder (paths, noreplace), text safe to print (text), the ranks of
a multi-GPU run (ranks), the command lines' shared options (cli), the autoencoder's name and loader (vae_name, vae),
and the one adapter to each library's private parts (torch_private, litdata_private)."""
