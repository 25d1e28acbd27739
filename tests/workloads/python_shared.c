/* python3 with its runtime in libpython3.X.so, as Fedora, RHEL and pyenv's --enable-shared builds are:
 * main hands over to the library at once. Built against the system's libpython at test time. */
int Py_BytesMain(int argc, char **argv);

int main(int argc, char **argv)
{
	return Py_BytesMain(argc, argv);
}
