"""training: the DDPM loop that gpufeed feeds, with its step meter (starvation.StepTimer) that bench reads too."""
