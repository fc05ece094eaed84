// The program behind every <layer>_layer_check (CMakeLists.txt, kiln_layer): never run. Linking it with the whole
// of one layer and only the layers below that one is the check; a call up the layers is an undefined symbol.
int main() { return 0; }
