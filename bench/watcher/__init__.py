"""`bench watch`: GPU starvation measured inside training programs people already run, with no edit to them.

hooks.py patches the loader classes so their iterators measure each step (meter.py) in every process of the program
(state.py keeps a process's meters and writes its rank file; boot/sitecustomize.py installs the hooks at start-up,
loaded under a private name, so that a program's own `bench`, `training`, `loaders` or `dataprep` keeps its name);
replay.py stands in for the loader in data-free runs; launch.py runs the program once, session.py runs the modes and
repeats and writes watch.json; merge.py and verdict.py turn rank files into figures and words; api.py is the same in
two lines of code. What runs inside the program imports the rest of gpufeed only relatively (records/)."""
