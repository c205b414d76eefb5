"""`bench soak`: run a command and show that a long run leaks nothing. tree.py samples what the command's process
tree holds; command.py runs the command, writes the samples as they come, and sums them up (flat or growing, and
what was left running) with a plot."""
